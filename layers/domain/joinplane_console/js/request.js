import { call } from "./api.js";
import { decide, host, place } from "./decide.js";
import { clear, h, hostname, words } from "./dom.js";
import { badge, memory, stamp } from "./format.js";
import { keyName, keysOf } from "./keys.js";

// The request's TPM facts in words, as the rest of the page is; a field the API adds later still
// shows, under its own name.
const TPM_LABELS = {
  ekPublicKeySha256: "TPM endorsement key SHA-256",
  activated: "TPM activated",
  verifiedBy: "TPM trusted by",
  manufacturer: "TPM manufacturer root",
  ekCertificateIssuer: "EK certificate issuer",
  ekCertificateSerial: "EK certificate serial",
  akName: "TPM attestation key name",
};

// One join request on a page of its own (#/requests/<requestId>), so a link to it can be pasted
// into a chat: everything the request carries, and every attestor's verdict.
export const title = "Join request";

function code(value) {
  return value ? h("code", { text: value }) : "—";
}

function facts(entries) {
  return h("dl", { class: "facts" }, entries.map(([k, v]) => [h("dt", { text: k }), h("dd", {}, v === null || v === undefined || v === "" ? "—" : typeof v === "string" ? words(v) : v)]));
}

// Each attestor's verdict, with the reasons it gave; a request recorded before verdicts were kept
// has its deferring votes only.
function attestors(request) {
  const verdicts = request.verdicts && request.verdicts.length
    ? request.verdicts
    : [...new Set(request.reasons.map((r) => r.attestor))].map((attestor) => ({ attestor, verdict: "defer" }));
  const rows = verdicts.map((v) => {
    const said = request.reasons.filter((r) => r.attestor === v.attestor);
    return h(
      "tr",
      {},
      h("th", { scope: "row", text: v.attestor }),
      h("td", {}, h("span", { class: `badge ${v.verdict}`, text: v.verdict })),
      h("td", {}, said.length ? said.map((r) => h("div", {}, r.message, " ", h("code", { class: "muted", text: r.code }))) : h("span", { class: "muted", text: "no objection" })),
    );
  });
  return h(
    "table",
    { class: "verdicts" },
    h("caption", { text: "Attestors' verdicts" }),
    h("thead", {}, h("tr", {}, ["Attestor", "Verdict", "Why"].map((c) => h("th", { scope: "col", text: c })))),
    h("tbody", {}, rows),
  );
}

// "1 of 2 approvals, by …": shown while a request's pool needs more than one approval, or once
// more than one key approved it.
function approvals(request, keys) {
  const given = request.approvals || [];
  const required = request.approvalsRequired;
  if (given.length <= 1 && !(required > 1)) return null;
  const count = required ? `${given.length} of ${required} approvals` : `${given.length} approvals`;
  if (!given.length) return count;
  const by = given.flatMap((a, i) => [i ? ", " : "", keyName(keys, a.by, { full: true })]);
  return h("span", { class: "approvals" }, `${count}, by `, ...by);
}

export function render(context, root, requestId) {
  const tenantId = context.tenantId;
  const failure = h("p", { class: "error", role: "alert" });
  const outcome = h("p", { class: "outcome", role: "status" });
  const body = h("div", {});
  root.append(h("p", {}, h("a", { href: "#/queue", text: "← Approval queue" })), outcome, failure, body);
  let stopped = false;

  async function act(request, action) {
    const result = await decide(tenantId, [request], action);
    if (!result) return;
    outcome.textContent = result.message || "";
    failure.textContent = result.failures.join(" ");
    await load();
  }

  async function load() {
    try {
      const [keys, request] = await Promise.all([keysOf(context.me), call("joinRequests/get", { tenantId, requestId })]);
      if (stopped) return;
      const m = request.machine || {};
      const hw = m.hardware || {};
      const tpm = m.tpm || {};
      const name = host(request);
      document.title = `${name} · join request · Joinplane console`;
      const open = request.state === "pending" || request.state === "approved";
      const actions = open
        ? h(
            "div",
            { class: "row-actions" },
            request.state === "pending" ? h("button", { type: "button", class: "primary", text: "Approve", "aria-label": `Approve ${name}`, onclick: () => act(request, "approve") }) : null,
            h("button", { type: "button", class: "danger", text: "Reject", "aria-label": `Reject ${name}`, onclick: () => act(request, "reject") }),
          )
        : null;
      clear(body).append(
        h("div", { class: "heading" }, h("h1", {}, hostname(name)), badge(request.state)),
        h("p", { class: "lede" }, "Join request ", h("code", { text: request.requestId }), " to ", words(place(request))),
        actions,
        h(
          "section",
          { "aria-labelledby": "request-facts" },
          h("h2", { id: "request-facts", text: "The request" }),
          facts([
            ["Request", code(request.requestId)],
            ["State", badge(request.state)],
            ["Pool", request.poolId ? request.poolId : h("span", {}, `site ${request.siteId} `, h("span", { class: "badge unclaimed", text: "unclaimed" }))],
            ["Site", request.siteId],
            ["Join token", h("span", {}, request.tokenDescription ? `${request.tokenDescription} ` : "", code(request.tokenId))],
            ["Source address", request.sourceIp],
            ["Requested", stamp(request.createdAt)],
            [open ? "Expires" : "Open until", stamp(request.expiresAt)],
            ["Approvals", approvals(request, keys)],
            ["Decided", request.decidedAt ? stamp(request.decidedAt) : null],
            ["Decided by", request.decidedBy ? keyName(keys, request.decidedBy, { full: true }) : null],
            ["Reason", request.reason],
            ["Used", request.consumedAt ? stamp(request.consumedAt) : null],
            ["Machine", code(request.machineId)],
          ]),
        ),
        h("section", { "aria-labelledby": "request-verdicts" }, h("h2", { id: "request-verdicts", text: "Attestors" }), attestors(request)),
        h(
          "section",
          { "aria-labelledby": "request-machine" },
          h("h2", { id: "request-machine", text: "What the machine sent" }),
          facts([
            ["Hostname", m.hostname ? hostname(m.hostname) : null],
            ["OS / architecture", [m.os, m.arch].filter(Boolean).join(" / ")],
            ["CPUs", m.cpuCount ? String(m.cpuCount) : null],
            ["Memory", memory(m.memoryMb)],
            ["GPUs", m.gpuCount ? String(m.gpuCount) : null],
            ["Serial number", code(hw.serialNumber)],
            ["System UUID", code(hw.systemUuid)],
            ["MAC addresses", (hw.macAddresses || []).length ? h("ul", { class: "plain" }, hw.macAddresses.map((mac) => h("li", {}, code(mac)))) : null],
            ["Key SHA-256", code(request.csrPublicKeySha256)],
            ["Fingerprint", code(m.fingerprint)],
            ...Object.entries(tpm).map(([k, v]) => [TPM_LABELS[k] || `TPM ${k}`, code(typeof v === "string" ? v : JSON.stringify(v))]),
          ]),
        ),
      );
      failure.textContent = "";
    } catch (error) {
      if (!stopped) failure.textContent = `Could not load join request ${requestId}: ${error.message}`;
    }
  }

  load();
  return {
    stop() {
      stopped = true;
    },
  };
}
