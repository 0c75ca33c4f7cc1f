// A tus 1.0 client for the origin's resumable uploads: PATCHes with XMLHttpRequest (for upload
// progress), each sized to take about two seconds, resumable after a failure, a pause or a page
// reload. A pause takes effect when the PATCH in flight ends: aborting one would leave the
// origin holding it (409 upload_busy) until its connection timeout.
// The upload's URL is remembered in localStorage under the file's name, size and date (the URL
// alone grants nothing without the token, which stays in sessionStorage).

import { OriginError, appPath, errorFrom, errorOf } from "./api.js";

const MIB = 1024 * 1024;
const FIRST_CHUNK = 2 * MIB, MIN_CHUNK = MIB, MAX_CHUNK = 64 * MIB, SECONDS_PER_CHUNK = 2;
const KEY = "depot.upload.";

const b64 = (text) => btoa(String.fromCharCode(...new TextEncoder().encode(text)));

function fingerprint(app, file) {
  return `${KEY}${app}|${file.name}|${file.size}|${file.lastModified}`;
}

/** The upload of this file that a previous page left unfinished, if any: {url, pack, policy, tags}. */
export function unfinished(app, file) {
  try {
    return JSON.parse(localStorage.getItem(fingerprint(app, file)) ?? "null");
  } catch {
    return null;
  }
}

export class Upload {
  /** events: progress({offset, size, speed, remaining}), state(name, detail), done(result) */
  constructor({ app, token, file, pack, policy, tags, installSize, language }, events) {
    Object.assign(this, { app, token, file, pack, policy, tags, installSize, language, events });
    this.key = fingerprint(app, file);
    this.url = unfinished(app, file)?.url ?? null;
    this.offset = 0;
    this.chunk = FIRST_CHUNK;
    this.paused = false;
    this.running = null;
    this.samples = [];
  }

  headers(extra = {}) {
    return { "Tus-Resumable": "1.0.0", Authorization: `Bearer ${this.token}`, ...extra };
  }

  async send(method, url, headers) {
    let response;
    try {
      response = await fetch(url, { method, headers: this.headers(headers), cache: "no-store", credentials: "omit" });
    } catch {
      throw new OriginError(0, "unreachable", "The origin does not answer; the upload resumes from what it kept when you retry.");
    }
    return response;
  }

  /** Starts or resumes: finds the upload's offset on the origin (creating it if needed), then sends the rest. */
  start() {
    this.paused = false;
    this.running = this.run();
    return this.running;
  }

  async run() {
    try {
      if (this.url) {
        const head = await this.send("HEAD", this.url);
        if (head.ok) {
          this.offset = Number(head.headers.get("Upload-Offset"));
          this.events.state("resuming", this.offset);
        } else if ([404, 410].includes(head.status)) {
          this.forget();
        } else {
          throw await errorFrom(head);
        }
      }
      if (!this.url) await this.create();
      let busy = 0;
      while (this.offset < this.file.size) {
        if (this.paused) return this.events.state("paused", this.offset);
        try {
          const began = performance.now();
          const from = this.offset;
          this.offset = await this.patch(from, Math.min(this.file.size, from + this.chunk));
          const seconds = (performance.now() - began) / 1000;
          this.chunk = Math.round(Math.min(MAX_CHUNK, Math.max(MIN_CHUNK, ((this.offset - from) / Math.max(seconds, 0.05)) * SECONDS_PER_CHUNK)));
          if (busy) this.events.state("uploading", this.offset);
          busy = 0;
        } catch (error) {
          // The origin still holds a request a lost connection left behind (until its timeout): ask again.
          if (!["upload_busy", "offset_mismatch"].includes(error.code) || ++busy > 60) throw error;
          this.events.state("waiting", error);
          await new Promise((resolve) => setTimeout(resolve, 1000));
          const head = await this.send("HEAD", this.url);
          if (!head.ok) throw await errorFrom(head);
          this.offset = Number(head.headers.get("Upload-Offset"));
        }
      }
      const status = await this.send("GET", this.url);
      if (!status.ok) throw await errorFrom(status);
      const body = await status.json();
      this.forget();
      this.events.done(body.result);
    } catch (error) {
      if (error instanceof OriginError && error.status >= 400 && error.status < 500 && ![409, 423].includes(error.status)) this.forget();
      this.events.state("failed", error);
    }
  }

  /** Stops after the PATCH in flight. */
  pause() {
    this.paused = true;
  }

  /** Stops after the PATCH in flight, then has the origin drop the upload. */
  async cancel() {
    this.paused = true;
    await this.running;
    if (this.url) await this.send("DELETE", this.url).catch(() => {});
    this.forget();
  }

  forget() {
    localStorage.removeItem(this.key);
    this.url = null;
  }

  async create() {
    const metadata = [["pack", this.pack], ["policy", this.policy], ["filetype", this.file.type || "application/octet-stream"]];
    if (this.tags.length) metadata.push(["tags", this.tags.join(",")]);
    if (this.installSize) metadata.push(["installSize", this.installSize]);
    if (this.language) metadata.push(["language", this.language]);
    const response = await this.send("POST", appPath(this.app, "/uploads"), {
      "Upload-Length": String(this.file.size),
      "Upload-Metadata": metadata.map(([k, v]) => `${k} ${b64(v)}`).join(","),
    });
    if (response.status !== 201) throw await errorFrom(response);
    this.url = new URL(response.headers.get("Location"), location.origin).pathname;
    this.offset = 0;
    localStorage.setItem(this.key, JSON.stringify({ url: this.url, pack: this.pack, policy: this.policy, tags: this.tags, installSize: this.installSize, language: this.language }));
    this.events.state("uploading", 0);
  }

  /** One PATCH of the file's bytes [from, to); resolves to the origin's new offset. */
  patch(from, to) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("PATCH", this.url);
      for (const [name, value] of Object.entries(this.headers({ "Content-Type": "application/offset+octet-stream", "Upload-Offset": String(from) }))) {
        xhr.setRequestHeader(name, value);
      }
      xhr.upload.onprogress = (event) => this.progress(from + event.loaded);
      xhr.onload = () => {
        if (xhr.status === 204) {
          const offset = Number(xhr.getResponseHeader("Upload-Offset"));
          this.progress(offset);
          resolve(offset);
        } else {
          reject(errorOf(xhr.status, xhr.responseText));
        }
      };
      xhr.onerror = () => reject(new OriginError(0, "unreachable", "The connection to the origin was lost; the upload resumes from what it kept when you retry."));
      xhr.send(this.file.slice(from, to));
    });
  }

  progress(offset) {
    const now = performance.now();
    this.samples.push([now, offset]);
    while (this.samples.length > 2 && now - this.samples[0][0] > 3000) this.samples.shift();
    const [t0, o0] = this.samples[0];
    const speed = now > t0 ? ((offset - o0) * 1000) / (now - t0) : 0;
    const remaining = speed > 0 ? (this.file.size - offset) / speed : Infinity;
    this.events.progress({ offset, size: this.file.size, speed, remaining });
  }
}
