import { call } from "./api.js";
import { clear, field, h, row, select, table, words } from "./dom.js";
import { badge, stamp, when } from "./format.js";
import { forgetPools, poolsOf } from "./pools_cache.js";

export const title = "Pools";

function duration(seconds) {
  if (seconds % 86400 === 0) return `${seconds / 86400} d`;
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  return `${Math.round(seconds / 60)} min`;
}

function describe(pool) {
  const bootstrap = pool.bootstrap || {};
  const entries = [
    ["Pool", pool.poolId],
    ["Name", pool.name],
    ["Site", pool.siteId],
    ["Workspace", pool.workspaceId],
    ["State", pool.state],
    ["Join requests wait", duration(pool.joinRequestTtlSeconds)],
    ["Certificates last", duration(pool.certificateTtlSeconds)],
    ["Control plane URL", bootstrap.controlplaneHttpUrl || "—"],
    ["Cluster", pool.cluster ? "configured" : "none"],
    ["Created", stamp(pool.createdAt)],
    ["Updated", stamp(pool.updatedAt)],
  ];
  if (pool.archivedAt) entries.push(["Archived", stamp(pool.archivedAt)]);
  return h("dl", { class: "facts" }, entries.map(([k, v]) => [h("dt", { text: k }), h("dd", {}, typeof v === "string" ? words(v) : v)]));
}

export function render(context, root) {
  const tenantId = context.tenantId;
  const state = select(["active", "archived", "all"], "active", { name: "state" });
  const failure = h("p", { class: "error", role: "alert" });
  const detail = h("div", { class: "detail-holder" });
  const holder = h("div", { class: "table-holder" });
  root.append(
    h("h1", { text: "Pools" }),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, field("State", state)),
    failure,
    detail,
    holder,
  );

  async function show(poolId) {
    try {
      const pool = await call("pools/get", { tenantId, poolId });
      const heading = h("h2", { tabindex: "-1", text: `${pool.name} (${pool.poolId})` });
      clear(detail).append(h("section", { class: "panel", "aria-label": `Pool ${pool.poolId}` }, heading, describe(pool), h("button", { type: "button", class: "quiet", text: "Close", onclick: () => clear(detail) })));
      heading.focus();
    } catch (error) {
      failure.textContent = `Could not read the pool: ${error.message}`;
    }
  }

  async function load() {
    forgetPools();
    try {
      const pools = (await poolsOf(tenantId)).filter((p) => state.value === "all" || p.state === state.value);
      const columns = ["Pool", "Name", "Site", "State", "Created", "Actions"];
      const rows = pools.map((p) =>
        row(columns, [
          h("code", { text: p.poolId }),
          p.name,
          p.siteId,
          badge(p.state),
          when(p.createdAt),
          h("button", { type: "button", "aria-label": `Details of ${p.poolId}`, text: "Details", onclick: () => show(p.poolId) }),
        ]),
      );
      clear(holder).append(pools.length ? table("Pools", columns, rows) : h("p", { class: "empty", text: "No pools." }));
      failure.textContent = "";
    } catch (error) {
      failure.textContent = `Could not list the pools: ${error.message}`;
    }
  }

  state.addEventListener("change", load);
  load();
  return null;
}
