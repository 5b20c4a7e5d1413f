import { all, call } from "./api.js";
import { ask } from "./dialog.js";
import { announce, clear, field, h, row, select, table } from "./dom.js";
import { badge, resources, stamp, tpmSummary, when } from "./format.js";
import { noPoolsReason, reachablePools } from "./pools_cache.js";

export const title = "Machines";

function facts(machine) {
  const hw = machine.hardware || {};
  const tpm = machine.tpm;
  const entries = [
    ["Machine", machine.machineId],
    ["Host", machine.hostname],
    ["State", machine.state],
    ["Pool", `${machine.poolId} (site ${machine.siteId})`],
    ["Resources", resources(machine)],
    ["Schedulable", machine.schedulable ? "yes" : "no"],
    ["Certificate serial", machine.certificateSerial || "—"],
    ["Certificate expires", stamp(machine.certificateExpiresAt)],
    ["Joined", stamp(machine.joinedAt)],
    ["Serial number", hw.serialNumber || "—"],
    ["System UUID", hw.systemUuid || "—"],
    ["MAC addresses", (hw.macAddresses || []).join(", ") || "—"],
    ["TPM", tpmSummary(tpm)],
    ["Worker image", machine.workerImageBaseline || "—"],
    ["Join request", machine.requestId || "—"],
    ["Join token", machine.tokenId || "—"],
  ];
  if (machine.state === "revoked") entries.push(["Revoked", stamp(machine.revokedAt)]);
  return h("dl", { class: "facts" }, entries.map(([k, v]) => [h("dt", { text: k }), h("dd", {}, v)]));
}

export function render(context, root) {
  const tenantId = context.tenantId;
  const picker = select([], null, { name: "poolId" });
  const state = select(["active", "revoked", "all"], "active", { name: "state" });
  const failure = h("p", { class: "error", role: "alert" });
  const detail = h("div", { class: "detail-holder" });
  const holder = h("div", { class: "table-holder" });
  root.append(
    h("h1", { text: "Machines" }),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, field("Pool", picker), field("State", state)),
    failure,
    detail,
    holder,
  );

  let latest = 0;
  async function load() {
    // Only the answer to the last choice is drawn: an earlier, slower one must not overwrite it.
    const mine = ++latest;
    if (!picker.value) return;
    try {
      const { items } = await all("machines/list", { tenantId, poolId: picker.value, state: state.value }, "machines", 5);
      if (mine !== latest) return;
      const columns = ["Host", "State", "Resources", "Certificate expires", "Joined", "Actions"];
      const rows = items.map((m) =>
        row(columns, [
          m.hostname || m.machineId,
          badge(m.state),
          resources(m),
          when(m.certificateExpiresAt),
          when(m.joinedAt),
          h(
            "div",
            { class: "row-actions" },
            h("button", { type: "button", "aria-label": `Details of ${m.hostname || m.machineId}`, text: "Details", onclick: () => show(m.machineId) }),
            m.state === "active"
              ? h("button", { type: "button", class: "danger", "aria-label": `Revoke ${m.hostname || m.machineId}`, text: "Revoke", onclick: () => revoke(m) })
              : null,
          ),
        ]),
      );
      clear(holder).append(items.length ? table(`Machines of ${picker.value}`, columns, rows) : h("p", { class: "empty", text: "No machines." }));
      failure.textContent = "";
    } catch (error) {
      failure.textContent = `Could not list the machines: ${error.message}`;
    }
  }

  async function show(machineId) {
    try {
      const machine = await call("machines/get", { tenantId, machineId });
      const heading = h("h2", { tabindex: "-1", text: machine.hostname || machine.machineId });
      clear(detail).append(
        h("section", { class: "panel", "aria-label": `Machine ${machine.hostname || machine.machineId}` }, heading, facts(machine), h("button", { type: "button", class: "quiet", text: "Close", onclick: () => clear(detail) })),
      );
      heading.focus();
    } catch (error) {
      failure.textContent = `Could not read the machine: ${error.message}`;
    }
  }

  async function revoke(machine) {
    const name = machine.hostname || machine.machineId;
    const values = await ask({
      title: `Revoke ${name}?`,
      description: "Its certificate is revoked and it can no longer renew. It must join again to come back.",
      fields: [field("Reason", h("input", { name: "reason", type: "text", maxlength: 256, autocomplete: "off" }))],
      confirmLabel: "Revoke",
      danger: true,
    });
    if (!values) return;
    try {
      const body = { tenantId, machineId: machine.machineId };
      if (values.reason.trim()) body.reason = values.reason.trim();
      await call("machines/revoke", body);
      announce(`Revoked ${name}.`);
    } catch (error) {
      failure.textContent = `Could not revoke ${name}: ${error.message}`;
    }
    await load();
  }

  picker.addEventListener("change", () => {
    clear(detail);
    load();
  });
  state.addEventListener("change", load);
  reachablePools(context.me)
    .then((pools) => {
      clear(picker).append(...pools.map((p) => h("option", { value: p.poolId, text: p.listed === false ? p.poolId : `${p.name} (${p.poolId})` })));
      if (!pools.length) clear(holder).append(h("p", { class: "empty", text: noPoolsReason(context.me, "No pools yet.") }));
      load();
    })
    .catch((error) => {
      failure.textContent = `Could not list the pools: ${error.message}`;
    });
  return null;
}
