// An archive-mapping policy: a pinned version that left its key is
// followed to where the one registry row that moves it says, if the row
// agrees with the pin's size; with no such row it is missing. Edit the
// rules, then run `custodian plugin test` on the build with `cases.json`
// (add a case for each rule you add).
//
// jco's conventions: u64 values are BigInts, options are the value or
// undefined, variants are `{ tag, val }`, and an error result is thrown
// as `{ tag, val }` of the error variant.

export const archiveMap = {
  nextHop(wanted, size, etag, rows) {
    const name = `${wanted.key}@${wanted.versionId}`;
    const moving = rows.filter(
      (row) => row.source.key === wanted.key && row.source.versionId === wanted.versionId,
    );
    if (moving.length === 0) {
      return { tag: 'missing', val: `no registry row moves ${name}` };
    }
    if (moving.length > 1) {
      throw { tag: 'corrupt', val: `${moving.length} registry rows move ${name}` };
    }
    const row = moving[0];
    if (size !== undefined && size !== null && size !== row.size) {
      throw {
        tag: 'corrupt',
        val: `the row for ${name} records ${row.size} bytes, the pin ${size}`,
      };
    }
    return { tag: 'follow', val: row };
  },
};
