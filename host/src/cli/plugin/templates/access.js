// An access policy: a principal with the `admin` role may do anything;
// any other may read and list. Edit the rules, then run `custodian plugin
// test` on the build with `cases.json` (add a case for each rule you add).
//
// jco's conventions: enums are their WIT names, variants are
// `{ tag, val }`.

export const accessRules = {
  decide(request) {
    const admin = request.principal.roles.includes('admin');
    if (admin || request.action === 'read' || request.action === 'list') {
      return { tag: 'allow' };
    }
    return { tag: 'deny', val: `${request.principal.name} may only read` };
  },
};
