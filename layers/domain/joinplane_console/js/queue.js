import { all } from "./api.js";
import { decide, host } from "./decide.js";
import { announce, clear, field, h, hostname, row, select, table, words } from "./dom.js";
import { badge, resources, tpmSummary, when } from "./format.js";
import { keyName, keysOf } from "./keys.js";

export const title = "Approval queue";
// How often the queue asks the API again: within 10 s of a change, an operator sees it.
export const REFRESH_MS = 5000;
// `open`: pending, and approved but not yet used (the machine has still to come back): what an
// operator is still answerable for.
const STATES = [
  ["open", "pending and approved, not yet used"],
  ["pending", "pending"],
  ["approved", "approved"],
  ["rejected", "rejected"],
  ["expired", "expired"],
  ["consumed", "consumed"],
  ["all", "all"],
];
const SOURCES = { open: ["pending", "approved"] };

export function requestLink(request) {
  return h("a", { href: `#/requests/${request.requestId}`, class: "host" }, hostname(host(request)));
}

// Where it asks to go, and with which token (by the description an operator gave it).
function placeCell(request) {
  const where = request.poolId
    ? h("div", { class: "word", text: request.poolId })
    : h("div", {}, words(`site ${request.siteId}`), " ", h("span", { class: "badge unclaimed", text: "unclaimed" }));
  const token = request.tokenDescription
    ? h("div", { class: "muted", title: request.tokenId }, words(request.tokenDescription))
    : h("div", {}, h("code", { class: "muted", text: request.tokenId || "—" }));
  return [where, token];
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
    (request.reasons || []).map((r) => h("li", {}, h("strong", { class: "word", text: `${r.attestor}:` }), " ", words(r.message || r.code))),
    ...proved,
  );
}

// The state, for a decided request who decided and why, and its age and expiry.
function decision(request, keys) {
  const open = request.state === "pending" || request.state === "approved";
  return h(
    "div",
    { class: "decision" },
    badge(request.state),
    // Half-approved: how far it got, so the next operator knows their approval is the one missing.
    request.state === "pending" && request.approvalsRequired > 1
      ? h("div", {}, `${(request.approvals || []).length} of ${request.approvalsRequired} approvals`)
      : null,
    request.decidedBy ? h("div", {}, "by ", keyName(keys, request.decidedBy)) : null,
    request.reason ? h("div", { class: "quote" }, words(`“${request.reason}”`)) : null,
    h("div", { class: "muted" }, "requested ", when(request.createdAt)),
    open ? h("div", { class: "muted" }, "expires ", when(request.expiresAt)) : null,
  );
}

export function render(context, root) {
  const tenantId = context.tenantId;
  let state = "open";
  let known = null; // requestId -> state, from the previous refresh
  let shown = []; // the requests drawn last
  let keys = new Map();
  const selected = new Set(); // requestIds ticked, kept across refreshes while still pending
  let timer = null;
  let stopped = false;
  let busy = false;

  const filter = select(STATES, state, { name: "state" });
  const updated = h("p", { class: "muted", id: "queue-updated" });
  const changes = h("p", { class: "changes", id: "queue-changes" });
  const outcome = h("p", { class: "outcome", id: "queue-outcome", role: "status" });
  const failure = h("p", { class: "error", role: "alert" });
  const holder = h("div", { class: "table-holder" });
  const count = h("span", { class: "muted", id: "queue-selected" });
  const approveMany = h("button", { type: "button", class: "primary", text: "Approve selected", onclick: () => decideSelected("approve") });
  const rejectMany = h("button", { type: "button", class: "danger", text: "Reject selected", onclick: () => decideSelected("reject") });
  const bulk = h("div", { class: "bulk", role: "group", "aria-label": "Selected requests" }, count, approveMany, rejectMany);

  root.append(
    h("div", { class: "heading" }, h("h1", { text: "Approval queue" }), updated),
    h("p", { class: "lede", text: "Join requests waiting for a decision, across every pool this key can read, oldest first." }),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, field("Show requests", filter)),
    outcome,
    changes,
    failure,
    bulk,
    holder,
  );

  filter.addEventListener("change", () => {
    state = filter.value;
    known = null;
    selected.clear();
    refresh();
  });

  function drawSelection() {
    const n = selected.size;
    count.textContent = n ? `${n} selected` : "Select pending requests to decide several at once.";
    approveMany.disabled = rejectMany.disabled = n === 0;
  }

  async function act(requests, action) {
    const result = await decide(tenantId, requests, action);
    if (!result) return;
    if (result.message) {
      outcome.textContent = result.message;
      for (const { request } of result.done) selected.delete(request.requestId);
    }
    failure.textContent = result.failures.join(" ");
    await refresh();
  }

  function decideSelected(action) {
    const requests = shown.filter((r) => selected.has(r.requestId));
    if (requests.length) act(requests, action);
  }

  function draw(requests, more) {
    const pendingOnes = requests.filter((r) => r.state === "pending");
    const all = h("input", {
      type: "checkbox",
      "aria-label": "Select every pending request",
      checked: pendingOnes.length > 0 && pendingOnes.every((r) => selected.has(r.requestId)),
      disabled: pendingOnes.length === 0,
      onchange: (e) => {
        for (const r of pendingOnes) (e.target.checked ? selected.add(r.requestId) : selected.delete(r.requestId));
        draw(shown, more);
      },
    });
    const columns = ["Select", "Machine", "Pool and token", "Attestors", "State", "Actions"];
    const rows = requests.map((request) => {
      const fresh = known !== null && !known.has(request.requestId);
      const name = host(request);
      const open = request.state === "pending" || request.state === "approved";
      const actions = open
        ? h(
            "div",
            { class: "row-actions" },
            request.state === "pending"
              ? h("button", { type: "button", class: "primary", "aria-label": `Approve ${name}`, text: "Approve", onclick: () => act([request], "approve") })
              : null,
            h("button", { type: "button", class: "danger", "aria-label": `Reject ${name}`, text: "Reject", onclick: () => act([request], "reject") }),
          )
        : h("span", { class: "muted", text: "—" });
      const tick =
        request.state === "pending"
          ? h("input", {
              type: "checkbox",
              "aria-label": `Select ${name}`,
              checked: selected.has(request.requestId),
              onchange: (e) => {
                if (e.target.checked) selected.add(request.requestId);
                else selected.delete(request.requestId);
                drawSelection();
              },
            })
          : null;
      const cells = [
        tick,
        h(
          "div",
          { class: "machine" },
          h("div", {}, requestLink(request), fresh ? h("span", { class: "badge fresh", text: "new" }) : null),
          h("code", { class: "id", text: request.requestId }),
          h("div", { class: "muted" }, words(resources(request.machine))),
        ),
        placeCell(request),
        reasons(request),
        decision(request, keys),
        actions,
      ];
      return row(columns, cells, { "data-request": request.requestId, class: fresh ? "fresh" : null });
    });
    const caption = `${requests.length}${more ? "+" : ""} ${state === "all" ? "" : `${state} `}request${requests.length === 1 ? "" : "s"}`;
    // Focus survives a redraw: the same control of the same request gets it back.
    const focused = document.activeElement;
    const focusKey = focused && focused.closest && focused.closest("tr[data-request]");
    const focusLabel = focused && focused.getAttribute && focused.getAttribute("aria-label");
    const grid = table(caption, columns, rows);
    // The first column's header is the select-all box (its label says what it does).
    const th = grid.querySelector("th");
    th.textContent = "";
    th.append(all);
    clear(holder).append(
      requests.length === 0 ? h("p", { class: "empty", text: state === "open" || state === "pending" ? "Nothing is waiting for a decision." : `No ${state} requests.` }) : grid,
    );
    bulk.hidden = pendingOnes.length === 0;
    drawSelection();
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
      keys = await keysOf(context.me);
      // Without a poolId: the queue across every pool the key reads, and their sites' unclaimed requests.
      const answers = await Promise.all(
        (SOURCES[state] || [state]).map((s) => all("joinRequests/list", { tenantId, state: s, limit: 100 }, "requests", 5)),
      );
      const items = answers.flatMap((a) => a.items);
      const more = answers.some((a) => a.more);
      // Oldest first: by creation time, then by id (a ULID, so creation order within a second).
      items.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.requestId.localeCompare(b.requestId));
      if (stopped) return;
      const change = summarise(items);
      if (change) {
        changes.textContent = `Since the last refresh: ${change}.`;
        announce(`Queue updated: ${change}.`);
      }
      for (const id of [...selected]) if (!items.some((r) => r.requestId === id && r.state === "pending")) selected.delete(id);
      shown = items;
      draw(items, more);
      known = new Map(items.map((r) => [r.requestId, r.state]));
      updated.textContent = `Updated ${new Date().toLocaleTimeString("en-GB")} · refreshes every ${REFRESH_MS / 1000} s`;
      failure.textContent = failure.textContent.startsWith("Could not load") ? "" : failure.textContent;
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
