import { all, call } from "./api.js";
import { ask } from "./dialog.js";
import { announce, clear, field, h, row, select, table } from "./dom.js";
import { badge, resources, tpmSummary, when } from "./format.js";

export const title = "Approval queue";
// How often the queue asks the API again: within 10 s of a change, an operator sees it.
export const REFRESH_MS = 5000;
const STATES = ["pending", "approved", "rejected", "expired", "consumed", "all"];
const TTLS = [
  ["900", "15 minutes"],
  ["3600", "1 hour"],
  ["14400", "4 hours"],
  ["86400", "24 hours"],
];

function host(request) {
  return (request.machine && request.machine.hostname) || request.requestId;
}

function poolCell(request) {
  if (request.poolId) return request.poolId;
  return h("span", {}, `site ${request.siteId} `, h("span", { class: "badge unclaimed", text: "unclaimed" }));
}

function reasons(request) {
  const tpm = request.machine && request.machine.tpm;
  // What the TPM proved is beside the votes: an operator approving a TPM join sees it.
  const proved = tpm && tpm.ekPublicKeySha256 ? [h("li", {}, h("strong", { text: "TPM: " }), tpmSummary(tpm))] : [];
  if ((!request.reasons || request.reasons.length === 0) && proved.length === 0) {
    return h("span", { class: "muted", text: "none" });
  }
  return h(
    "ul",
    { class: "reasons" },
    (request.reasons || []).map((r) => h("li", {}, h("strong", { text: `${r.attestor}: ` }), r.message || r.code)),
    ...proved,
  );
}

export function render(context, root) {
  const tenantId = context.tenantId;
  let state = "pending";
  let known = null; // requestId -> state, from the previous refresh
  let timer = null;
  let stopped = false;
  let busy = false;

  const filter = select(STATES, state, { name: "state" });
  const updated = h("p", { class: "muted", id: "queue-updated" });
  const changes = h("p", { class: "changes", id: "queue-changes" });
  const failure = h("p", { class: "error", role: "alert" });
  const holder = h("div", { class: "table-holder" });

  root.append(
    h("div", { class: "heading" }, h("h1", { text: "Approval queue" }), updated),
    h("p", { class: "lede", text: "Join requests waiting for a decision, across every pool this key can read, oldest first." }),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, field("Show requests", filter)),
    changes,
    failure,
    holder,
  );

  filter.addEventListener("change", () => {
    state = filter.value;
    known = null;
    refresh();
  });

  async function decide(request, action) {
    const name = host(request);
    let poolChoice = null;
    const fields = [];
    if (!request.poolId) {
      // A site's request no pool has claimed yet: approving it places it in one of the site's pools.
      const answer = await call("pools/list", { tenantId, siteId: request.siteId, state: "active" });
      poolChoice = select(answer.pools.map((p) => [p.poolId, `${p.name} (${p.poolId})`]), null, { name: "poolId" });
      fields.push(field("Pool", poolChoice));
    }
    if (action === "approve") {
      fields.push(
        field("Reason (optional)", h("input", { name: "reason", type: "text", maxlength: 256, autocomplete: "off" })),
        field("Approval valid for", select(TTLS, "3600", { name: "ttlSeconds" }), "The machine must finish joining within this time."),
      );
    } else {
      fields.push(field("Reason", h("input", { name: "reason", type: "text", maxlength: 256, required: true, autocomplete: "off" })));
    }
    const values = await ask({
      title: action === "approve" ? `Approve ${name}?` : `Reject ${name}?`,
      description: `${name} asks to join ${request.poolId || `site ${request.siteId}`}.`,
      fields,
      confirmLabel: action === "approve" ? "Approve" : "Reject",
      danger: action === "reject",
      validate: (v) => (action === "reject" && !v.reason.trim() ? "Give a reason for the rejection." : null),
    });
    if (!values) return;
    const body = { tenantId, requestId: request.requestId, poolId: values.poolId || request.poolId || undefined };
    if (values.reason && values.reason.trim()) body.reason = values.reason.trim();
    if (action === "approve") body.ttlSeconds = Number(values.ttlSeconds);
    try {
      await call(`joinRequests/${action}`, body);
      announce(`${action === "approve" ? "Approved" : "Rejected"} ${name}.`);
      failure.textContent = "";
    } catch (error) {
      failure.textContent = `Could not ${action} ${name}: ${error.message}`;
    }
    await refresh();
  }

  function draw(requests, more) {
    const columns = ["Host", "Pool", "Resources", "Attestors", ...(state === "pending" ? [] : ["State"]), "Requested", "Expires", "Actions"];
    const rows = requests.map((request) => {
      const fresh = known !== null && !known.has(request.requestId);
      const actions =
        request.state === "pending"
          ? h(
              "div",
              { class: "row-actions" },
              h("button", { type: "button", class: "primary", "aria-label": `Approve ${host(request)}`, text: "Approve", onclick: () => decide(request, "approve") }),
              h("button", { type: "button", class: "danger", "aria-label": `Reject ${host(request)}`, text: "Reject", onclick: () => decide(request, "reject") }),
            )
          : h("span", { class: "muted", text: request.decidedBy ? `by ${request.decidedBy}` : "—" });
      const cells = [
        h("span", { class: "host" }, host(request), fresh ? h("span", { class: "badge fresh", text: "new" }) : null),
        poolCell(request),
        resources(request.machine),
        reasons(request),
        ...(state === "pending" ? [] : [badge(request.state)]),
        when(request.createdAt),
        when(request.expiresAt),
        actions,
      ];
      return row(columns, cells, { "data-request": request.requestId, class: fresh ? "fresh" : null });
    });
    const caption = `${requests.length}${more ? "+" : ""} ${state === "all" ? "" : `${state} `}request${requests.length === 1 ? "" : "s"}`;
    // Focus survives a redraw: the same control of the same request gets it back.
    const focused = document.activeElement;
    const focusKey = focused && focused.closest && focused.closest("tr[data-request]");
    const focusLabel = focused && focused.getAttribute && focused.getAttribute("aria-label");
    clear(holder).append(
      requests.length === 0 ? h("p", { class: "empty", text: state === "pending" ? "Nothing is waiting for a decision." : `No ${state} requests.` }) : table(caption, columns, rows),
    );
    if (focusKey && focusLabel) {
      const again = holder.querySelector(`tr[data-request="${CSS.escape(focusKey.dataset.request)}"] [aria-label="${CSS.escape(focusLabel)}"]`);
      if (again) again.focus();
    }
  }

  function summarise(requests) {
    const ids = new Set(requests.map((r) => r.requestId));
    if (known === null) return "";
    const arrived = requests.filter((r) => !known.has(r.requestId)).length;
    const left = [...known.keys()].filter((id) => !ids.has(id)).length;
    const parts = [];
    if (arrived) parts.push(`${arrived} new request${arrived === 1 ? "" : "s"}`);
    if (left) parts.push(`${left} left the ${state === "all" ? "list" : `${state} list`}`);
    return parts.join(", ");
  }

  async function refresh() {
    if (busy || stopped) return;
    busy = true;
    clearTimeout(timer);
    try {
      // Without a poolId: the queue across every pool the key reads, and their sites' unclaimed requests.
      const { items, more } = await all("joinRequests/list", { tenantId, state, limit: 100 }, "requests", 5);
      // Oldest first: by creation time, then by id (a ULID, so creation order within a second).
      items.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.requestId.localeCompare(b.requestId));
      if (stopped) return;
      const change = summarise(items);
      if (change) {
        changes.textContent = `Since the last refresh: ${change}.`;
        announce(`Queue updated: ${change}.`);
      }
      draw(items, more);
      known = new Map(items.map((r) => [r.requestId, r.state]));
      updated.textContent = `Updated ${new Date().toLocaleTimeString("en-GB")} · refreshes every ${REFRESH_MS / 1000} s`;
      failure.textContent = "";
    } catch (error) {
      if (!stopped) failure.textContent = `Could not load the queue: ${error.message}`;
    } finally {
      busy = false;
      if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
    }
  }

  refresh();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
