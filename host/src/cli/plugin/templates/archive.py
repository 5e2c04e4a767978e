"""An archive-mapping policy: a pinned version that left its key is
followed to where the one registry row that moves it says, if the row
agrees with the pin's size; with no such row it is missing. Edit the
rules, then run `custodian plugin test` on the build with `cases.json`
(add a case for each rule you add)."""

from wit_world import exports
from wit_world.exports.archive_map import Hop_Follow, Hop_Missing
from wit_world.imports.types import Error_Corrupt
from componentize_py_types import Err


class ArchiveMap(exports.ArchiveMap):
    def next_hop(self, wanted, size, etag, rows):
        name = f"{wanted.key}@{wanted.version_id}"
        moving = [row for row in rows if row.source == wanted]
        if not moving:
            return Hop_Missing(f"no registry row moves {name}")
        if len(moving) > 1:
            raise Err(Error_Corrupt(f"{len(moving)} registry rows move {name}"))
        row = moving[0]
        if size is not None and size != row.size:
            raise Err(
                Error_Corrupt(f"the row for {name} records {row.size} bytes, the pin {size}")
            )
        return Hop_Follow(row)
