import { all, call } from "./api.js";
import { ask } from "./dialog.js";
import { announce, clear, field, h, row, select, table } from "./dom.js";
import { badge, when } from "./format.js";
import { noPoolsReason, reachablePools } from "./pools_cache.js";

export const title = "Join tokens";
const TTLS = [
  ["3600", "1 hour"],
  ["86400", "1 day"],
  ["604800", "7 days"],
  ["2592000", "30 days"],
];

export function render(context, root) {
  const tenantId = context.tenantId;
  const picker = select([], null, { name: "poolId" });
  const failure = h("p", { class: "error", role: "alert" });
  const secret = h("div", { class: "secret-holder" });
  const holder = h("div", { class: "table-holder" });
  const ttl = select(TTLS, "86400", { name: "ttlSeconds" });
  const uses = h("input", { name: "maxUses", type: "number", min: 1, max: 10000, value: "1", inputmode: "numeric" });
  const approval = h("input", { name: "requireApproval", type: "checkbox" });
  const description = h("input", { name: "description", type: "text", maxlength: 256, autocomplete: "off" });
  const create = h(
    "form",
    { class: "panel", "aria-labelledby": "create-token-title" },
    h("h2", { id: "create-token-title", text: "Create a join token" }),
    h(
      "div",
      { class: "fields" },
      field("Valid for", ttl),
      field("Uses", uses),
      field("Description", description),
      h("div", { class: "field check" }, approval, h("label", { for: (approval.id = "require-approval"), text: "Require an operator's approval for each join" })),
    ),
    h("button", { type: "submit", class: "primary", text: "Create token" }),
  );

  root.append(
    h("h1", { text: "Join tokens" }),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, field("Pool", picker)),
    failure,
    create,
    secret,
    holder,
  );

  let latest = 0;
  async function load() {
    // Only the answer to the last choice is drawn: an earlier, slower one must not overwrite it.
    const mine = ++latest;
    if (!picker.value) return;
    try {
      const { items } = await all("joinTokens/list", { tenantId, poolId: picker.value }, "joinTokens", 5);
      if (mine !== latest) return;
      const columns = ["Token", "Description", "State", "Uses left", "Approval", "Expires", "Actions"];
      const rows = items.map((token) =>
        row(columns, [
          h("code", { text: token.tokenId }),
          token.description || "—",
          badge(token.state),
          `${token.usesRemaining} of ${token.maxUses}`,
          token.requireApproval ? "required" : "not required",
          when(token.expiresAt),
          token.state === "active"
            ? h("button", { type: "button", class: "danger", "aria-label": `Revoke ${token.tokenId}`, text: "Revoke", onclick: () => revoke(token) })
            : "—",
        ]),
      );
      clear(holder).append(items.length ? table(`Join tokens of ${picker.value}`, columns, rows) : h("p", { class: "empty", text: "This pool has no join tokens." }));
      failure.textContent = "";
    } catch (error) {
      failure.textContent = `Could not list the tokens: ${error.message}`;
    }
  }

  async function revoke(token) {
    const ok = await ask({
      title: `Revoke ${token.tokenId}?`,
      description: "Machines can no longer join with it. Machines that already joined are not affected.",
      confirmLabel: "Revoke",
      danger: true,
    });
    if (!ok) return;
    try {
      await call("joinTokens/revoke", { tenantId, tokenId: token.tokenId });
      announce(`Revoked ${token.tokenId}.`);
    } catch (error) {
      failure.textContent = `Could not revoke ${token.tokenId}: ${error.message}`;
    }
    await load();
  }

  create.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      tenantId,
      poolId: picker.value,
      ttlSeconds: Number(ttl.value),
      maxUses: Number(uses.value),
      requireApproval: approval.checked,
      description: description.value.trim(),
    };
    try {
      const created = await call("joinTokens/create", body);
      showSecret(created);
      description.value = "";
      await load();
    } catch (error) {
      failure.textContent = `Could not create the token: ${error.message}`;
    }
  });

  // The secret is in this answer only (the API keeps its SHA-256): shown once, with a copy button,
  // and gone when the operator dismisses it or leaves the view.
  function showSecret(created) {
    const value = h("input", { type: "text", readonly: true, value: created.token, class: "secret", spellcheck: "false" });
    const copied = h("span", { class: "muted", role: "status" });
    const copy = h("button", {
      type: "button",
      text: "Copy",
      onclick: async () => {
        try {
          await navigator.clipboard.writeText(created.token);
          copied.textContent = "Copied.";
        } catch {
          value.select();
          copied.textContent = "Select and copy it by hand (Ctrl+C).";
        }
      },
    });
    const panel = h(
      "section",
      { class: "panel notice", "aria-labelledby": "secret-title" },
      h("h2", { id: "secret-title", tabindex: "-1", text: `Token ${created.tokenId} created` }),
      h("p", { text: "Copy the secret now: it is shown this once and cannot be read again." }),
      h("div", { class: "copy-row" }, field("Secret", value), copy, copied),
      h("button", { type: "button", class: "quiet", text: "Done", onclick: () => clear(secret) }),
    );
    clear(secret).append(panel);
    panel.querySelector("h2").focus();
  }

  picker.addEventListener("change", () => {
    clear(secret);
    load();
  });

  // A pool the key's grants name but it may not read has no known state: offered, and the API says so
  // if it is not active.
  reachablePools(context.me)
    .then((pools) => {
      const active = pools.filter((p) => p.state === "active" || p.listed === false);
      clear(picker).append(...active.map((p) => h("option", { value: p.poolId, text: p.listed === false ? p.poolId : `${p.name} (${p.poolId})` })));
      if (!active.length) {
        const reason = pools.length ? "No active pool: every pool this API key sees is archived." : noPoolsReason(context.me, "No active pool: create one with the CLI (joinplane pools create).");
        clear(holder).append(h("p", { class: "empty", text: reason }));
        create.hidden = true;
        return;
      }
      load();
    })
    .catch((error) => {
      failure.textContent = `Could not list the pools: ${error.message}`;
    });
  return null;
}
