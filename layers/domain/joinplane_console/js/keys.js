import { all } from "./api.js";
import { h, words } from "./dom.js";
import { covers } from "./pools_cache.js";

// Who decided: the API names a key by its id; an operator knows it by its description. The tenant's
// key list is read once per sign-in when this key may read it; the signed-in key is always known.
let cached = null;
export function keysOf(me) {
  if (!cached || cached.keyId !== me.keyId) {
    const known = new Map([[me.keyId, me.description]]);
    const reads = (me.grants || []).some((g) => g.endsWith("@tenant") && covers(g.slice(0, g.lastIndexOf("@")), "iam:api-keys:read"));
    const fill = ({ items }) => {
      for (const key of items) known.set(key.keyId, key.description);
      return known;
    };
    const listed = reads ? all("apiKeys/list", { tenantId: me.tenantId }, "apiKeys", 5).then(fill, () => known) : Promise.resolve(known);
    cached = { keyId: me.keyId, listed };
  }
  return cached.listed;
}

export function forgetKeys() {
  cached = null;
}

// Not a key at all: the join's attestors, the retention job, the machine itself.
const ACTORS = new Set(["attestors", "operator", "retention", "machine", "join", "cluster-key"]);

export function keyLabel(keys, keyId) {
  if (!keyId) return null;
  if (ACTORS.has(keyId)) return keyId;
  const description = keys.get(keyId);
  return description ? `${description}` : keyId;
}

// The key's description, with its id a hover away (and in full where there is room).
export function keyName(keys, keyId, { full = false } = {}) {
  if (!keyId) return "—";
  const description = ACTORS.has(keyId) ? null : keys.get(keyId);
  if (!description) return ACTORS.has(keyId) ? keyId : h("code", { text: keyId });
  if (!full) return h("span", { class: "key", title: keyId }, words(description));
  return h("span", { class: "key" }, words(description), " ", h("code", { class: "muted", text: keyId }));
}
