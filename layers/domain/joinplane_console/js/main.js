import { ApiError, call, session, whenKeyIsRejected } from "./api.js";
import { announce, clear } from "./dom.js";
import * as audit from "./audit.js";
import { forgetKeys } from "./keys.js";
import * as machines from "./machines.js";
import * as pools from "./pools.js";
import * as queue from "./queue.js";
import * as request from "./request.js";
import * as simulate from "./simulate.js";
import * as tokens from "./tokens.js";

const VIEWS = { queue, tokens, machines, pools, simulate, audit, requests: request };
// A view inside a section of the navigation: a request's page is part of the queue.
const SECTION = { requests: "queue" };
const INVALID_KEY = "This API key is not valid.";

const signInView = document.getElementById("sign-in-view");
const signInForm = document.getElementById("sign-in");
const keyInput = document.getElementById("api-key");
const signInError = document.getElementById("sign-in-error");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
const whoKey = document.getElementById("who-key");
const view = document.getElementById("view");

let context = null;
let current = null;

function showSignIn(message = "") {
  context = null;
  stopCurrent();
  clear(view);
  view.hidden = true;
  nav.hidden = true;
  who.hidden = true;
  signInView.hidden = false;
  signInError.textContent = message;
  keyInput.setAttribute("aria-invalid", message ? "true" : "false");
  keyInput.value = "";
  keyInput.focus();
}

function stopCurrent() {
  if (current && current.stop) current.stop();
  current = null;
}

// The key's tenant and grants come from the API, so nobody types a tenant id.
async function signIn(key) {
  const me = await call("apiKeys/whoami", {}, key);
  session.keep(key);
  context = { me, tenantId: me.tenantId };
  signInView.hidden = true;
  who.hidden = false;
  nav.hidden = false;
  view.hidden = false;
  whoKey.textContent = `${me.description || me.keyId} · tenant ${me.tenantId}`;
  whoKey.title = `${me.keyId}: ${me.grants.join(", ")}`;
  route();
}

function route() {
  if (!context) return;
  const match = /^#\/(\w+)(?:\/([\w-]+))?/.exec(location.hash);
  if (!match && location.hash && !location.hash.startsWith("#/")) return; // the skip link
  const name = match && VIEWS[match[1]] && (match[1] !== "requests" || match[2]) ? match[1] : "queue";
  for (const link of nav.querySelectorAll("a")) {
    if (link.getAttribute("href") === `#/${SECTION[name] || name}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  stopCurrent();
  clear(view);
  current = VIEWS[name].render(context, view, match && match[2]) || null;
  document.title = `${VIEWS[name].title} · Joinplane console`;
}

signInForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = keyInput.value.trim();
  if (!key) {
    signInError.textContent = "Enter an API key.";
    keyInput.setAttribute("aria-invalid", "true");
    keyInput.focus();
    return;
  }
  signInError.textContent = "";
  try {
    await signIn(key);
  } catch (error) {
    const message = error instanceof ApiError && error.invalidKey ? INVALID_KEY : error.message;
    signInError.textContent = message;
    keyInput.setAttribute("aria-invalid", "true");
    keyInput.focus();
  }
});

document.getElementById("sign-out").addEventListener("click", () => {
  session.forget();
  forgetKeys(); // the next key may see other keys, or none
  showSignIn();
  announce("Signed out.");
});

// A key revoked while signed in: forget it and say so.
whenKeyIsRejected(() => {
  session.forget();
  showSignIn(INVALID_KEY);
});

window.addEventListener("hashchange", route);

const kept = session.key();
if (kept) {
  signIn(kept).catch((error) => {
    session.forget();
    showSignIn(error instanceof ApiError && error.invalidKey ? INVALID_KEY : error.message);
  });
} else {
  showSignIn();
}
