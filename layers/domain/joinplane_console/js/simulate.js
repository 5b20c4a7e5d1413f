import { call } from "./api.js";
import { announce, clear, field, h, hostname, row, select, table, words } from "./dom.js";
import { badge, when } from "./format.js";
import { noPoolsReason, reachablePools } from "./pools_cache.js";

export const title = "Policy simulation";

const EXAMPLE = `[
  {
    "name": "gpu-rack",
    "when": "request.hostname.startsWith(\\"gpu-\\")",
    "decision": "approve",
    "reason": "the new GPU rack"
  }
]`;

// What happened to the join, in the words of the queue: the join's outcome, then the request's fate.
function happened(item) {
  const parts = [item.actual];
  if (item.kind === "request" && item.state !== "pending") parts.push(item.decidedBy ? `${item.state} by ${item.decidedBy}` : item.state);
  if (item.kind === "join" && item.state === "revoked") parts.push("revoked since");
  return parts.join(", ");
}

function rule(item) {
  if (!item.rule) return h("span", { class: "muted", text: "no rule matched" });
  const name = h("code", { text: item.rule });
  const why = item.reason ? words(`${item.error ? "error: " : ""}${item.reason}`) : [];
  return h("span", {}, name, why.length ? " " : null, why.length ? h("span", { class: "muted" }, why) : null);
}

function summary(counts) {
  return (
    `${counts.total} joins: ${counts.wouldAdmit} would be admitted, ${counts.wouldDefer} deferred, ${counts.wouldDeny} denied. ` +
    `${counts.changed} would change: ${counts.deferredWouldAdmit} deferred → admit, ${counts.deferredWouldDeny} deferred → deny, ` +
    `${counts.admittedWouldDefer} admitted → defer, ${counts.admittedWouldDeny} admitted → deny.` +
    (counts.errors ? ` ${counts.errors} evaluation errors (those defer).` : "")
  );
}

export function render(context, root) {
  const tenantId = context.tenantId;
  const picker = select([], null, { name: "poolId" });
  const draft = h("textarea", { name: "joinPolicy", rows: 10, spellcheck: "false", autocomplete: "off", class: "code" });
  draft.value = EXAMPLE;
  const onlyChanges = h("input", { type: "checkbox", name: "changed" });
  const failure = h("p", { class: "error", role: "alert" });
  const result = h("div", { class: "table-holder" });
  let last = null;

  const form = h(
    "form",
    { class: "simulate", onsubmit: (event) => { event.preventDefault(); run(); } },
    field("Pool", picker),
    field("Draft policy (JSON rules)", draft, "Evaluated over the pool's recent join requests and machines. Nothing is saved."),
    h("button", { type: "submit", class: "primary", text: "Simulate" }),
  );
  root.append(
    h("h1", { text: "Policy simulation" }),
    form,
    failure,
    h("div", { class: "filters" }, h("label", {}, onlyChanges, " Only joins whose outcome would change")),
    result,
  );

  function draw() {
    if (!last) return;
    const items = onlyChanges.checked ? last.items.filter((i) => i.changed) : last.items;
    const columns = ["Machine", "Happened", "Would", "Rule", "Change", "When"];
    const rows = items.map((i) =>
      row(
        columns,
        [
          h("span", { class: "host" }, i.hostname ? hostname(i.hostname) : null, h("code", { class: "id", text: i.id })),
          happened(i),
          badge(i.decision),
          rule(i),
          i.changed ? h("strong", { text: "changes" }) : "same",
          when(i.at),
        ],
        i.changed ? { class: "changed" } : {},
      ),
    );
    const note = last.complete ? null : h("p", { class: "hint", text: `The ${last.limit} newest requests and machines; older joins were not simulated.` });
    clear(result).append(
      h("p", { class: "summary" }, words(summary(last.counts))),
      note,
      items.length ? table(`Simulated joins of ${last.poolId}`, columns, rows) : h("p", { class: "empty", text: last.items.length ? "No outcome would change." : "This pool has no joins to simulate." }),
    );
  }

  async function run() {
    let rules;
    try {
      rules = JSON.parse(draft.value);
    } catch (error) {
      failure.textContent = `The draft is not JSON: ${error.message}`;
      draft.setAttribute("aria-invalid", "true");
      draft.focus();
      return;
    }
    if (rules && !Array.isArray(rules) && Array.isArray(rules.joinPolicy)) rules = rules.joinPolicy;
    try {
      last = await call("pools/simulatePolicy", { tenantId, poolId: picker.value, joinPolicy: rules });
      failure.textContent = "";
      draft.setAttribute("aria-invalid", "false");
      draw();
      announce(summary(last.counts));
    } catch (error) {
      last = null;
      clear(result);
      failure.textContent = `Could not simulate: ${error.message}`;
    }
  }

  // The draft starts as the pool's saved policy, until the operator types in it.
  let edited = false;
  draft.addEventListener("input", () => {
    edited = true;
  });
  let readable = new Set();
  async function startFromSaved() {
    const poolId = picker.value;
    if (!readable.has(poolId)) return; // offered by a grant's id: the key may not read the pool itself
    try {
      const pool = await call("pools/get", { tenantId, poolId });
      if (!edited && picker.value === poolId && pool.joinPolicy && pool.joinPolicy.length) draft.value = JSON.stringify(pool.joinPolicy, null, 2);
    } catch {
      // A key that may not read the pool simulates from the example.
    }
  }

  onlyChanges.addEventListener("change", draw);
  picker.addEventListener("change", () => {
    last = null;
    clear(result);
    startFromSaved();
  });
  reachablePools(context.me)
    .then((pools) => {
      clear(picker).append(...pools.map((p) => h("option", { value: p.poolId, text: p.listed === false ? p.poolId : `${p.name} (${p.poolId})` })));
      readable = new Set(pools.filter((p) => p.listed !== false).map((p) => p.poolId));
      if (!pools.length) clear(result).append(h("p", { class: "empty", text: noPoolsReason(context.me, "No pools yet.") }));
      else startFromSaved();
    })
    .catch((error) => {
      failure.textContent = `Could not list the pools: ${error.message}`;
    });
  return null;
}
