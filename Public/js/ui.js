// Small DOM helpers: elements built with textContent only (nothing from the origin is ever
// parsed as HTML), the notice and alert regions, and the confirmation dialog.

export const $ = (id) => document.getElementById(id);

/** el("td", {className: "num"}, "text", child…) */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key.startsWith("aria") || key.startsWith("data")) node.setAttribute(key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`), value);
    else node[key] = value;
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function button(label, onClick, props = {}) {
  const node = el("button", { type: "button", ...props }, label);
  node.addEventListener("click", onClick);
  return node;
}

export function notify(text) {
  const node = $("notice");
  node.textContent = text;
  node.hidden = false;
}

/** Shows a refusal verbatim, with optional follow-up actions ([label, handler]). */
export function alertError(error, actions = []) {
  $("alert-text").textContent = error.text ?? String(error.message ?? error);
  $("alert-actions").replaceChildren(...actions.map(([label, handler]) => button(label, () => { clearAlert(); handler(); })));
  $("alert").hidden = false;
  $("alert").scrollIntoView({ block: "nearest" });
}

export function clearAlert() {
  $("alert").hidden = true;
  $("alert-text").textContent = "";
  $("alert-actions").replaceChildren();
}

/**
 * Asks before an action; resolves to true when confirmed (with `field`, {label, value}: to the
 * text entered). Escape or Cancel resolve to false.
 */
export function confirmAction(title, text, confirmLabel = "Confirm", field = null) {
  const dialog = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = confirmLabel;
  $("confirm-field").hidden = !field;
  if (field) {
    $("confirm-label").textContent = field.label;
    $("confirm-input").value = field.value ?? "";
  }
  return new Promise((resolve) => {
    const finish = (value) => {
      $("confirm-ok").onclick = $("confirm-cancel").onclick = dialog.oncancel = null;
      if (dialog.open) dialog.close();
      resolve(value);
    };
    $("confirm-ok").onclick = () => finish(field ? $("confirm-input").value.trim() || false : true);
    $("confirm-cancel").onclick = () => finish(false);
    dialog.oncancel = (event) => { event.preventDefault(); finish(false); };
    dialog.showModal();
    (field ? $("confirm-input") : $("confirm-cancel")).focus();
  });
}

/** Copies text, reporting where it went. */
export async function copy(text, what) {
  try {
    await navigator.clipboard.writeText(text);
    notify(`${what} copied to the clipboard.`);
  } catch {
    notify(`Select the ${what} and copy it: this browser refused the clipboard.`);
  }
}

/** Gives each cell its column's name (data-label), so a phone can lay rows out as cards. */
export function labelCells(table) {
  const names = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  for (const row of table.tBodies[0]?.rows ?? []) {
    [...row.cells].forEach((cell, index) => {
      if (names[index] && cell.colSpan === 1) cell.dataset.label = names[index];
    });
  }
}
