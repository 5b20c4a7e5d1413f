import { clear, h, uid } from "./dom.js";

// A modal <dialog>: the browser traps focus in it, Escape cancels, and focus returns to the button
// that opened it. `details` are nodes shown under the description, `fields` labelled controls;
// `confirm` resolves with the form's values, or null when cancelled. `validate` may return a
// message that keeps the dialog open.
export function ask({ title, description, details = null, fields = [], confirmLabel, danger = false, validate }) {
  return new Promise((resolve) => {
    const opener = document.activeElement;
    const titleId = uid("dlg");
    const error = h("p", { class: "error", role: "alert" });
    const cancel = h("button", { type: "button", class: "quiet", text: "Cancel" });
    const confirm = h("button", { type: "submit", class: danger ? "danger" : "primary", text: confirmLabel });
    const form = h(
      "form",
      { method: "dialog", novalidate: true },
      h("h2", { id: titleId, text: title }),
      description ? h("p", {}, description) : null,
      details,
      fields,
      error,
      h("div", { class: "actions" }, cancel, confirm),
    );
    const dialog = h("dialog", { "aria-labelledby": titleId }, form);
    let settled = false;
    const finish = (value) => {
      if (settled) return;
      settled = true;
      dialog.close();
      dialog.remove();
      if (opener && opener.isConnected) opener.focus();
      resolve(value);
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const values = Object.fromEntries(
        [...form.elements].filter((el) => el.name).map((el) => [el.name, el.type === "checkbox" ? el.checked : el.value]),
      );
      const problem = validate ? validate(values) : null;
      if (problem) {
        clear(error).append(problem);
        return;
      }
      finish(values);
    });
    cancel.addEventListener("click", () => finish(null));
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      finish(null);
    });
    document.body.append(dialog);
    dialog.showModal();
    const first = form.querySelector("input, select, textarea") || confirm;
    first.focus();
  });
}
