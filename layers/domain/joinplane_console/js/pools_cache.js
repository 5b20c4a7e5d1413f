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
