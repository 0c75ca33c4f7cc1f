// The origin's HTTP API as the dashboard uses it. Tokens live in sessionStorage only: never in a
// URL, a cookie or localStorage, so closing the tab signs out.

const TOKENS = "depot.tokens";
const CURRENT = "depot.current";

/** A refusal from the origin: its status, code and message, as the origin wrote them. */
export class OriginError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  /** As the origin wrote it: status, code and message (a connection that failed has no status). */
  get text() {
    return this.status ? `${this.status} ${this.code}: ${this.message}` : this.message;
  }
}

/** The signed-in apps: [{app, role, token, mode}]. */
export function sessions() {
  try {
    const list = JSON.parse(sessionStorage.getItem(TOKENS) ?? "[]");
    return Array.isArray(list) ? list : [];
  } catch {
    return [];
  }
}

export function currentSession() {
  const list = sessions();
  return list.find((s) => s.app === sessionStorage.getItem(CURRENT)) ?? list[0] ?? null;
}

export function selectApp(app) {
  sessionStorage.setItem(CURRENT, app);
}

export function forget(app) {
  sessionStorage.setItem(TOKENS, JSON.stringify(sessions().filter((s) => s.app !== app)));
  if (sessionStorage.getItem(CURRENT) === app) sessionStorage.removeItem(CURRENT);
}

/** Checks a pasted token with the origin and keeps it for this tab. */
export async function signIn(token) {
  const trimmed = token.trim();
  if (!trimmed) throw new OriginError(0, "empty", "Paste a token first.");
  const who = await call("/v1/session", { token: trimmed });
  if (!who.appExists) throw new OriginError(404, "not_found", `The token is for ${who.app}, which this origin does not have.`);
  const entry = { app: who.app, role: who.role, mode: who.mode, expiresAt: who.expiresAt ?? null, token: trimmed };
  sessionStorage.setItem(TOKENS, JSON.stringify([...sessions().filter((s) => s.app !== who.app), entry]));
  selectApp(who.app);
  return entry;
}

/** Any API call: JSON in and out, the origin's error body turned into an OriginError. */
export async function call(path, { method = "GET", token = currentSession()?.token, query, accept = "json" } = {}) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  let response;
  try {
    response = await fetch(url, { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" });
  } catch {
    throw new OriginError(0, "unreachable", "The origin does not answer. Check that it is running, then try again.");
  }
  if (!response.ok) throw await errorFrom(response);
  if (accept === "text") return response.text();
  if (response.status === 204) return null;
  return response.json();
}

/** The origin's refusal from a fetch response. */
export async function errorFrom(response) {
  return errorOf(response.status, await response.text());
}

/** The origin's refusal from a status and body: its JSON error, or the status alone (libmicrohttpd's own answers are HTML). */
export function errorOf(status, text) {
  try {
    const { code, message } = JSON.parse(text).error;
    return new OriginError(status, code, message);
  } catch {
    return new OriginError(status, "error", `The origin answered ${status}.`);
  }
}

/** The app's paths. */
export function appPath(app, rest = "") {
  return `/v1/apps/${encodeURIComponent(app)}${rest}`;
}

/** A release's manifest, from its signed envelope (the payload is base64 JSON). */
export async function release(app, version) {
  const envelope = await call(appPath(app, `/releases/${version}`));
  const bytes = Uint8Array.from(atob(envelope.payload), (c) => c.charCodeAt(0));
  return JSON.parse(new TextDecoder().decode(bytes));
}
