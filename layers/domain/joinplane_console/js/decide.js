import { call } from "./api.js";
import { ask } from "./dialog.js";
import { field, h, select } from "./dom.js";

// Approving or rejecting one request or several: one dialog, one reason, then one call per request
// (the joinRequests API decides one request a call). The queue and a request's own page share it.

const TTLS = [
  ["900", "15 minutes"],
  ["3600", "1 hour"],
  ["14400", "4 hours"],
  ["86400", "24 hours"],
];

export function host(request) {
  return (request.machine && request.machine.hostname) || request.requestId;
}

export function place(request) {
  return request.poolId || `site ${request.siteId}`;
}

function token(request) {
  return request.tokenDescription ? `the token “${request.tokenDescription}”` : `token ${request.tokenId || "unknown"}`;
}

function listing(requests) {
  return h(
    "ul",
    { class: "decide-list" },
    requests.map((r) => h("li", {}, h("strong", { text: host(r) }), " ", h("code", { text: r.requestId }), ` → ${place(r)}`)),
  );
}

function joinNames(names) {
  if (names.length <= 1) return names.join("");
  return `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]}`;
}

// "Approved gpu-node-07 into gpu-rack-1", grouped by pool when several were approved.
// A request whose pool needs more approvals stays pending: "Recorded your approval of gpu-node-07
// (1 of 2 approvals)".
function outcome(action, done) {
  if (action === "reject") return `Rejected ${joinNames(done.map(({ request }) => host(request)))}.`;
  const partial = done.filter(({ answer }) => answer && answer.state === "pending");
  const said = partial.length
    ? `Recorded your approval of ${joinNames(partial.map(({ request, answer }) => `${host(request)} (${(answer.approvals || []).length} of ${answer.approvalsRequired} approvals)`))}; it needs another key's.`
    : "";
  const approved = done.filter((d) => !partial.includes(d));
  if (!approved.length) return said;
  const byPool = new Map();
  for (const { request, answer } of approved) {
    const pool = (answer && answer.poolId) || request.poolId;
    byPool.set(pool, [...(byPool.get(pool) || []), host(request)]);
  }
  return `Approved ${[...byPool].map(([pool, names]) => `${joinNames(names)} into ${pool}`).join("; ")}.${said ? ` ${said}` : ""}`;
}

// Asks, then decides. Resolves to null when cancelled, else { message, failures, done }.
export async function decide(tenantId, requests, action) {
  const one = requests.length === 1 ? requests[0] : null;
  const fields = [];
  const unclaimed = requests.filter((r) => !r.poolId);
  const sites = [...new Set(unclaimed.map((r) => r.siteId))];
  if (action === "approve" && sites.length > 1) {
    return { message: null, failures: ["Unclaimed requests of different sites go into different pools: approve them one site at a time."], done: [] };
  }
  let poolChoice = null;
  if (action === "approve" && sites.length === 1) {
    // A site's request no pool has claimed yet: approving it places it in one of the site's pools.
    const answer = await call("pools/list", { tenantId, siteId: sites[0], state: "active" });
    poolChoice = select(answer.pools.map((p) => [p.poolId, `${p.name} (${p.poolId})`]), null, { name: "poolId" });
    fields.push(field(unclaimed.length === requests.length ? "Pool" : `Pool for site ${sites[0]}`, poolChoice));
  }
  if (action === "approve") {
    fields.push(
      field("Reason (optional)", h("input", { name: "reason", type: "text", maxlength: 256, autocomplete: "off" })),
      field("Approval valid for", select(TTLS, "3600", { name: "ttlSeconds" }), "The machine must finish joining within this time."),
    );
  } else {
    fields.push(field("Reason", h("input", { name: "reason", type: "text", maxlength: 256, required: true, autocomplete: "off" })));
  }
  const verb = action === "approve" ? "Approve" : "Reject";
  const values = await ask({
    title: one ? `${verb} ${host(one)}?` : `${verb} ${requests.length} requests?`,
    description: one
      ? h("span", {}, `${host(one)} (`, h("code", { text: one.requestId }), `) asks to join ${place(one)} with ${token(one)}${one.sourceIp ? `, from ${one.sourceIp}` : ""}.`)
      : `The same ${action === "approve" ? "approval" : "reason"} applies to each of these:`,
    details: one ? null : listing(requests),
    fields,
    confirmLabel: one ? verb : `${verb} ${requests.length}`,
    danger: action === "reject",
    validate: (v) => (action === "reject" && !v.reason.trim() ? "Give a reason for the rejection." : null),
  });
  if (!values) return null;
  const done = [];
  const failures = [];
  for (const request of requests) {
    const body = { tenantId, requestId: request.requestId, poolId: request.poolId || values.poolId || undefined };
    if (values.reason && values.reason.trim()) body.reason = values.reason.trim();
    if (action === "approve") body.ttlSeconds = Number(values.ttlSeconds);
    try {
      done.push({ request, answer: await call(`joinRequests/${action}`, body) });
    } catch (error) {
      failures.push(`Could not ${action} ${host(request)}: ${error.message}`);
    }
  }
  return { message: done.length ? outcome(action, done) : null, failures, done };
}
