import { call } from "./api.js";
import { clear, field, h, select, words } from "./dom.js";
import { stamp, when } from "./format.js";
import { keyLabel, keysOf } from "./keys.js";
import { poolsOf } from "./pools_cache.js";

export const title = "Audit trail";
// docs/events.md's catalogue, for the filter (the API filters by exact detail type).
const TYPES = [
  "security.join-request.created",
  "security.join-request.approval-recorded",
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

// Events name ids; an operator knows machines by hostname and keys by description. The requests and
// machines an event names are read once each (what the key may not read stays an id).
function resolver(tenantId) {
  const requests = new Map();
  const machines = new Map();
  const read = (cache, operation, body, field) => {
    if (!cache.has(body[field])) cache.set(body[field], call(operation, { tenantId, ...body }).catch(() => null));
    return cache.get(body[field]);
  };
  return async function resolve(events) {
    const wanted = [];
    for (const event of events) {
      const d = event.detail || {};
      if (d.requestId) wanted.push(read(requests, "joinRequests/get", { requestId: d.requestId }, "requestId"));
      if (d.machineId) wanted.push(read(machines, "machines/get", { machineId: d.machineId }, "machineId"));
    }
    await Promise.all(wanted);
    const found = {};
    for (const event of events) {
      const d = event.detail || {};
      found[event.eventId] = {
        request: d.requestId ? await requests.get(d.requestId) : null,
        machine: d.machineId ? await machines.get(d.machineId) : null,
      };
    }
    return found;
  };
}

const VERBS = {
  "security.join-request.created": "join requested",
  "security.join-request.approval-recorded": "join approval recorded",
  "security.join-request.approved": "join approved",
  "security.join-request.rejected": "join rejected",
  "security.join-request.expired": "join request expired",
  "security.join-request.consumed": "approved join used",
  "security.machine.joined": "machine joined",
  "security.machine.key-rotated": "machine key rotated",
  "security.machine.revoked": "machine revoked",
};

// One line: what happened, to which machine (by hostname), where, by whom and why.
function summary(event, seen, keys) {
  const d = event.detail || {};
  const { request, machine } = seen || {};
  const verb = VERBS[event.detailType] || event.detailType.replace(/^security\./, "").replace(".", " ");
  const hostname = (machine && machine.hostname) || (request && request.machine && request.machine.hostname) || d.hostname;
  const subject = hostname || d.machineId || d.requestId || d.tokenId || d.keyId || d.caId || "";
  const parts = [h("strong", { text: verb }), subject ? ` ${subject}` : ""];
  if (d.poolId) parts.push(` in ${d.poolId}`);
  // One of several approvals a pool requires: say how far the request got.
  if (d.approvalsRequired && d.approvals) parts.push(` (${d.approvals.length} of ${d.approvalsRequired})`);
  let actor = d.approvedBy || d.decidedBy || d.revokedBy || d.createdBy || d.actor || null;
  let reason = d.reason || null;
  // A join an operator allowed: the event says "operator", the request says which key.
  if ((actor === "operator" || event.detailType === "security.join-request.consumed") && request && request.decidedBy) {
    actor = request.decidedBy;
    reason = reason || request.reason;
    parts.push(", approved");
  }
  if (actor) parts.push(" by ", keyLabel(keys, actor));
  if (reason) parts.push(`: “${reason}”`);
  if (!reason && d.reasons && d.reasons.length) parts.push(` (${d.reasons.map((r) => r.message || r.code).join("; ")})`);
  return parts.map((part) => (typeof part === "string" ? words(part) : part));
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

  const resolve = resolver(tenantId);
  function item(event, seen, keys) {
    const details = Object.entries(event.detail || {}).filter(([k]) => !HIDDEN.has(k));
    return h(
      "li",
      {},
      h("div", { class: "when" }, when(event.occurredAt)),
      h(
        "details",
        {},
        h("summary", {}, summary(event, seen, keys)),
        h("dl", { class: "facts" }, [
          [h("dt", { text: "Occurred" }), h("dd", {}, stamp(event.occurredAt))],
          [h("dt", { text: "Event" }), h("dd", { text: event.eventId })],
          ...details.map(([k, v]) => [h("dt", { text: k }), h("dd", {}, words(typeof v === "string" ? v : JSON.stringify(v)))]),
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
      const [seen, keys] = await Promise.all([resolve(answer.events), keysOf(context.me)]);
      if (mine !== latest) return;
      if (reset) clear(list);
      list.append(...answer.events.map((event) => item(event, seen[event.eventId], keys)));
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
