"""An access policy: a principal with the `admin` role may do anything;
any other may read and list. Edit the rules, then run `custodian plugin
test` on the build with `cases.json` (add a case for each rule you add)."""

from wit_world import exports
from wit_world.exports.access_rules import Action, Decision_Allow, Decision_Deny


class AccessRules(exports.AccessRules):
    def decide(self, request):
        admin = "admin" in request.principal.roles
        if admin or request.action in (Action.READ, Action.LIST):
            return Decision_Allow()
        return Decision_Deny(f"{request.principal.name} may only read")
