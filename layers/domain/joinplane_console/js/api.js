// The console's one way to the API: every call carries the operator's key as a Bearer token. The
// key lives in sessionStorage (this tab, until it closes or the operator signs out), never in
// localStorage, a cookie or a URL.

const KEY = "joinplane.apiKey";

export const session = {
  key() {
    return sessionStorage.getItem(KEY);
  },
  keep(key) {
    sessionStorage.setItem(KEY, key);
  },
  forget() {
    sessionStorage.removeItem(KEY);
  },
};

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || (body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || null;
    this.reason = error.reason || null;
  }

  get invalidKey() {
    return this.status === 401;
  }
}

let onInvalidKey = () => {};
export function whenKeyIsRejected(handler) {
  onInvalidKey = handler;
}

// POST /api/compute/<operation>, resolved against the page (…/console), so the console works under
// whatever base path the API is served at.
export async function call(operation, body = {}, key = session.key()) {
  // Signed out while a view was still loading: nothing is sent without a key.
  if (!key) throw new ApiError(0, { error: { message: "Signed out." } });
  const url = new URL(`api/compute/${operation}`, document.baseURI);
  let response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
    });
  } catch {
    throw new ApiError(0, { error: { message: "The API cannot be reached. Check your connection." } });
  }
  let parsed = null;
  try {
    parsed = await response.json();
  } catch {
    parsed = null;
  }
  if (!response.ok) {
    const error = new ApiError(response.status, parsed);
    if (error.invalidKey && key === session.key()) onInvalidKey(error);
    throw error;
  }
  return parsed;
}

// Every page of a list operation, up to `pages` pages (`nextCursor` until there is none).
export async function all(operation, body, field, pages = 10) {
  const items = [];
  let cursor = null;
  for (let page = 0; page < pages; page += 1) {
    const answer = await call(operation, cursor ? { ...body, cursor } : body);
    items.push(...answer[field]);
    cursor = answer.nextCursor;
    if (!cursor) return { items, more: false };
  }
  return { items, more: true };
}
