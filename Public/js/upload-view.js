// The upload form: file picker or drop, resumable upload with progress, speed, time left,
// pause, retry (also after a reload: choose the same file again and it continues).

import { Upload, unfinished } from "./tus.js";
import { $, notify, alertError, clearAlert } from "./ui.js";
import { human, exact, duration } from "./format.js";

let upload = null;

const show = (ids, visible) => ids.forEach((id) => { $(id).hidden = !visible; });

function setState(text) {
  $("upload-state").textContent = text;
}

function buttons(state) {
  $("upload-start").hidden = state !== "idle";
  $("upload-pause").hidden = state !== "uploading";
  $("upload-retry").hidden = state !== "failed" && state !== "paused";
  $("upload-cancel").hidden = state === "idle";
  $("upload-retry").textContent = state === "paused" ? "Resume" : "Retry";
}

function progress({ offset, size, speed, remaining }) {
  const percent = size ? Math.floor((offset * 100) / size) : 100;
  $("upload-progress").value = percent;
  $("upload-progress").setAttribute("aria-valuetext", `${percent} percent`);
  $("upload-percent").textContent = `${percent} %`;
  const moving = speed > 0 && offset < size;
  const figures = [`${human(offset)} of ${human(size)}`, moving ? `${human(speed)}/s` : "", offset >= size ? "done" : moving ? `${duration(remaining)} left` : ""];
  $("upload-figures").textContent = figures.filter(Boolean).join(" · ");
}

/** Offers to resume when the chosen file has an unfinished upload, and proposes a pack id. */
function fileChosen(session) {
  const file = $("file").files[0];
  if (!file) return;
  if (!$("pack-id").value) $("pack-id").value = file.name.replace(/\.[^.]*$/, "").replace(/[^A-Za-z0-9.-]+/g, "-").replace(/^[^A-Za-z0-9]+/, "").slice(0, 64);
  const previous = unfinished(session().app, file);
  if (previous) {
    $("pack-id").value = previous.pack;
    $("policy").value = previous.policy;
    $("tags").value = previous.tags.join(", ");
    $("install-size").value = previous.installSize ?? "";
    $("language").value = previous.language ?? "";
    $("upload-start").textContent = "Resume upload";
    show(["upload-status"], true);
    setState(`An unfinished upload of ${file.name} as ${previous.pack} was found: Resume upload continues it where the origin stopped.`);
  } else {
    $("upload-start").textContent = "Upload";
  }
}

/** Forgets what the form showed (another app was chosen); an upload in flight goes on. */
export function resetUpload() {
  if (upload && !$("upload-pause").hidden) return;
  upload = null;
  buttons("idle");
  show(["upload-status"], false);
  $("upload-form").reset();
  $("upload-start").textContent = "Upload";
}

export function setUpUpload(session, staged) {
  const drop = $("drop");
  $("file").addEventListener("change", () => fileChosen(session));
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    if (!event.dataTransfer.files.length) return;
    $("file").files = event.dataTransfer.files;
    fileChosen(session);
  });

  $("upload-form").addEventListener("submit", (event) => {
    event.preventDefault();
    clearAlert();
    const file = $("file").files[0];
    const current = session();
    if (!file || !current) return;
    const tags = $("tags").value.split(",").map((t) => t.trim()).filter(Boolean);
    const installSize = current.mode === "managed" ? $("install-size").value.trim() : "";
    const language = $("language").value.trim();
    upload = new Upload({ app: current.app, token: current.token, file, pack: $("pack-id").value.trim(), policy: $("policy").value, tags, installSize, language }, {
      progress,
      state: (name, detail) => {
        buttons(["resuming", "waiting"].includes(name) ? "uploading" : name);
        if (name === "paused" || name === "failed") progress({ offset: upload.offset, size: file.size, speed: 0, remaining: Infinity });
        if (name === "uploading") setState(`Uploading ${file.name} as ${upload.pack}…`);
        if (name === "resuming") setState(`Resuming at ${human(detail)} (${exact(detail)}) already on the origin…`);
        if (name === "paused") setState(`Paused at ${human(detail)}. Resume continues from there.`);
        if (name === "waiting") setState(`The origin still holds the interrupted request (${detail.code}); trying again…`);
        if (name === "failed") {
          setState(`Stopped: ${detail.text ?? detail.message}`);
          alertError(detail);
        }
      },
      done: (result) => {
        buttons("idle");
        $("upload-start").textContent = "Upload";
        const stored = result.pack.keyID ? "encrypted" : "as uploaded";
        setState(`Done: ${result.pack.id} (${human(result.pack.size)}, ${exact(result.pack.size)} ${stored}) is ${result.staged ? "staged in the draft" : `in release ${result.release}`}.`);
        notify(`${result.pack.id} uploaded and staged.`);
        $("upload-form").reset();
        staged();
      },
    });
    show(["upload-status"], true);
    buttons("uploading");
    progress({ offset: 0, size: file.size, speed: 0, remaining: Infinity });
    setState(`Starting ${file.name}…`);
    upload.start();
  });
  $("upload-pause").addEventListener("click", () => {
    upload?.pause();
    $("upload-pause").hidden = true;
    setState("Pausing when the part in flight has arrived…");
  });
  $("upload-retry").addEventListener("click", () => { clearAlert(); buttons("uploading"); upload?.start(); });
  $("upload-cancel").addEventListener("click", async () => {
    await upload?.cancel();
    upload = null;
    buttons("idle");
    setState("Cancelled: the origin dropped what it had received.");
  });
}
