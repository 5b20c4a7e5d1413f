import { all } from "./api.js";

// The tenant's pools, for the pickers of the other views (one list per sign-in is plenty: a new
// pool shows up on the next visit to a view).
let cached = null;
export async function poolsOf(tenantId) {
  if (!cached || cached.tenantId !== tenantId) {
    cached = { tenantId, pools: all("pools/list", { tenantId, state: "all" }, "pools", 5).then((r) => r.items) };
  }
  try {
    return await cached.pools;
  } catch (error) {
    cached = null;
    throw error;
  }
}

export function forgetPools() {
  cached = null;
}

// Does a grant's permission pattern cover `wanted` (the API's permission_covers: `*` matches one
// part, and a trailing `*` everything after it)?
export function covers(held, wanted) {
  const h = held.split(":");
  const w = wanted.split(":");
  for (let i = 0; i < h.length; i += 1) {
    if (i >= w.length) return false;
    if (h[i] === "*") {
      if (i === h.length - 1) return true;
      continue;
    }
    if (h[i] !== w[i]) return false;
  }
  return h.length === w.length;
}

// The pools a key reaches: those pools/list shows (it shows only the pools the key may read), and
// those its grants name by id (`…@compute-pool/<poolId>`), which a key limited to, say, join tokens
// can work in without reading the pool itself. Those carry `listed: false` and no name or state.
export async function reachablePools(me) {
  const listed = await poolsOf(me.tenantId);
  const known = new Set(listed.map((p) => p.poolId));
  const named = [];
  for (const grant of me.grants || []) {
    const scope = grant.slice(grant.lastIndexOf("@") + 1);
    const poolId = scope.startsWith("compute-pool/") ? scope.slice("compute-pool/".length) : null;
    if (poolId && poolId !== "*" && !known.has(poolId)) {
      known.add(poolId);
      named.push({ poolId, name: poolId, state: null, listed: false });
    }
  }
  return [...listed, ...named];
}

// Why a picker is empty, truthfully: a key that may read pools somewhere sees none because there
// are none (`none`); any other key sees none because of its grants.
export function noPoolsReason(me, none) {
  const reads = (me.grants || []).some((grant) => covers(grant.slice(0, grant.lastIndexOf("@")), "compute:pools:read"));
  return reads ? none : "This API key sees no pools: none of its grants reaches one.";
}
