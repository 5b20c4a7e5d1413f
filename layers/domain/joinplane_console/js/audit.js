import { call } from "./api.js";
import { clear, field, h, select } from "./dom.js";
import { stamp, when } from "./format.js";
import { poolsOf } from "./pools_cache.js";

export const title = "Audit trail";
// docs/events.md's catalogue, for the filter (the API filters by exact detail type).
const TYPES = [
  "security.join-request.created",
  "security.join-request.approved",
  "security.join-request.rejected",
  "security.join-request.expired",
  "security.join-request.consumed",
  "security.machine.joined",
  "security.machine.key-rotated",
  "security.machine.revoked",
  "security.join-token.created",
  "security.join-token.revoked",
  "security.pool.created",
  "security.pool.updated",
  "security.pool.archived",
  "security.api-key.created",
  "security.api-key.revoked",
  "security.certificate-authority.created",
  "security.certificate-authority.requested",
  "security.certificate-authority.rotated",
  "security.certificate-authority.expired",
  "security.cluster-key.rotated",
  "security.cluster.node-joined",
  "security.discovery-entry.registered",
  "security.discovery-entry.removed",
  "security.tpm-key.allowed",
  "security.tpm-key.removed",
];
const HIDDEN = new Set(["tenantId", "eventId", "occurredAt"]);

function summary(event) {
  const d = event.detail || {};
  const subject = d.hostname || d.machineId || d.requestId || d.tokenId || d.keyId || d.caId || event.poolId || "";
  const actor = d.decidedBy || d.revokedBy || d.createdBy || d.actor || null;
  return [event.detailType.replace(/^security\./, "").replace(".", " "), subject && ` ${subject}`, actor ? ` by ${actor}` : ""].join("");
}

export function render(context, root) {
  const tenantId = context.tenantId;
  const pool = select([["", "All pools"]], "", { name: "poolId" });
  const type = select([["", "All events"], ...TYPES.map((t) => [t, t.replace(/^security\./, "")])], "", { name: "detailType" });
  const failure = h("p", { class: "error", role: "alert" });
  const list = h("ol", { class: "timeline", "aria-label": "Security events, newest first" });
  const more = h("button", { type: "button", text: "Load older events", hidden: true });
  let cursor = null;

  root.append(
    h("h1", { text: "Audit trail" }),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, field("Pool", pool), field("Event type", type)),
    failure,
    list,
    more,
  );

  function item(event) {
    const details = Object.entries(event.detail || {}).filter(([k]) => !HIDDEN.has(k));
    return h(
      "li",
      {},
      h("div", { class: "when" }, when(event.occurredAt)),
      h(
        "details",
        {},
        h("summary", {}, summary(event)),
        h("dl", { class: "facts" }, [
          [h("dt", { text: "Occurred" }), h("dd", {}, stamp(event.occurredAt))],
          [h("dt", { text: "Event" }), h("dd", { text: event.eventId })],
          ...details.map(([k, v]) => [h("dt", { text: k }), h("dd", { text: typeof v === "string" ? v : JSON.stringify(v) })]),
        ]),
      ),
    );
  }

  let latest = 0;
  async function load(reset) {
    // Only the answer to the last choice is drawn: an earlier, slower one must not overwrite it.
    const mine = ++latest;
    if (reset) cursor = null;
    const body = { tenantId, limit: 50 };
    if (pool.value) body.poolId = pool.value;
    if (type.value) body.detailType = type.value;
    if (cursor) body.cursor = cursor;
    try {
      const answer = await call("auditEvents/list", body);
      if (mine !== latest) return;
      if (reset) clear(list);
      list.append(...answer.events.map(item));
      if (reset && !answer.events.length) list.append(h("li", { class: "empty", text: "No events match." }));
      cursor = answer.nextCursor || null;
      more.hidden = !cursor;
      failure.textContent = "";
    } catch (error) {
      failure.textContent = `Could not read the audit trail: ${error.message}`;
    }
  }

  pool.addEventListener("change", () => load(true));
  type.addEventListener("change", () => load(true));
  more.addEventListener("click", () => load(false));
  poolsOf(tenantId)
    .then((pools) => pool.append(...pools.map((p) => h("option", { value: p.poolId, text: p.poolId }))))
    .catch(() => {});
  load(true);
  return null;
}
