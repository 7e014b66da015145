// EZGH console: one page over the public HTTP API, with the user's API key.
//
// Rules this file keeps:
// - Every value from the API reaches the page as text (textContent, setAttribute on safe
//   attributes); nothing from the API is ever parsed as HTML.
// - The key lives in sessionStorage only (gone when the browser session ends). A link may carry
//   it in the URL fragment (#key=…&org=…&project=…), which browsers never send to a server;
//   the page removes it from the address bar at once and moves it to sessionStorage, after
//   asking if the tab already holds another session.
// - An API error is shown as the API words it: `code: message`.
"use strict";

(function () {
  const STORE = { key: "ezgh.apiKey", org: "ezgh.orgId", project: "ezgh.projectId" };
  const RUN_STATUSES = ["running", "cancelling", "completed", "failed", "cancelled", "timedOut"];
  const ENDED = new Set(["completed", "failed", "cancelled", "timedOut"]);
  const WAIT_KINDS = new Set(["sleep", "callback", "message", "invoke"]);
  const REFRESH_MS = 2000;
  const PAGE_SIZE = 100;

  const main = document.getElementById("main");
  const banner = document.getElementById("banner");

  // --- DOM helpers: text only -------------------------------------------------------------

  /** An element with attributes and children; strings become text nodes, never HTML. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  /** An SVG element (the flow graph). */
  function s(tag, attrs, ...children) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name.startsWith("on")) {
        // Handlers are functions from this file; never an attribute string a browser would run.
        if (typeof value === "function") el.addEventListener(name.slice(2), value);
      } else if (name === "text") {
        el.textContent = String(value);
      } else if (name === "href") {
        el.setAttribute("href", safeHref(value));
      } else {
        el.setAttribute(name, value === true ? "" : String(value));
      }
    }
  }

  function append(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  /** Links point inside the console only. */
  function safeHref(value) {
    const text = String(value);
    return text.startsWith("#/") ? text : "#/runs";
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
  }

  function badge(status) {
    const text = status === undefined || status === null ? "—" : String(status);
    return h("span", { class: "badge s-" + text.replace(/[^A-Za-z]/g, ""), text });
  }

  function fmtTime(iso) {
    if (!iso) return h("span", { class: "muted", text: "—" });
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    const pad = (n, w = 2) => String(n).padStart(w, "0");
    const text =
      `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
    return h("time", { datetime: iso, title: iso, text });
  }

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
    if (ms < 1000) return `${Math.round(ms)} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
    if (ms < 3600000) return `${(ms / 60000).toFixed(1)} min`;
    if (ms < 86400000) return `${(ms / 3600000).toFixed(1)} h`;
    return `${(ms / 86400000).toFixed(1)} d`;
  }

  function jsonBlock(value, testid) {
    const text = value === undefined ? "(none)" : JSON.stringify(value, null, 2);
    return h("pre", { class: "json", "data-testid": testid, text });
  }

  function errorText(err) {
    if (err instanceof ApiError) return `${err.code}: ${err.message}`;
    return `error: ${err && err.message ? err.message : String(err)}`;
  }

  function showBanner(text, ok) {
    banner.textContent = text;
    banner.className = ok ? "banner ok" : "banner";
    banner.hidden = !text;
  }

  function errorBox(err) {
    return h("div", { class: "card error", "data-testid": "error", text: errorText(err) });
  }

  // --- session -----------------------------------------------------------------------------

  function credentials() {
    const key = sessionStorage.getItem(STORE.key);
    const org = sessionStorage.getItem(STORE.org);
    const project = sessionStorage.getItem(STORE.project);
    return key && org && project ? { key, org, project } : null;
  }

  function saveCredentials(key, org, project) {
    sessionStorage.setItem(STORE.key, key);
    sessionStorage.setItem(STORE.org, org);
    sessionStorage.setItem(STORE.project, project);
  }

  function signOut() {
    for (const name of Object.values(STORE)) sessionStorage.removeItem(name);
    location.hash = "#/signin";
    route();
  }

  // A sign-in link's credentials while the tab asks whether they may replace its session.
  // Only here, in memory: nothing is stored until the user says so.
  let pendingLink = null;

  /**
   * A sign-in link's fragment: wipe it from the address bar and history at once, then sign
   * in with it, unless the tab holds another session: a link must not replace that silently
   * (a link from someone else would put the tab in their project), so the page asks first.
   */
  function takeFragmentCredentials() {
    const fragment = location.hash.replace(/^#/, "");
    if (!/(^|&)key=/.test(fragment)) return;
    const params = new URLSearchParams(fragment);
    const key = params.get("key");
    const org = params.get("org");
    const project = params.get("project");
    history.replaceState(null, "", location.pathname + location.search + "#/runs");
    if (!(key && org && project)) {
      showBanner("The sign-in link needs key, org and project.");
      return;
    }
    const held = credentials();
    if (held && (held.key !== key || held.org !== org || held.project !== project)) {
      pendingLink = { key, org, project };
      return;
    }
    pendingLink = null;
    saveCredentials(key, org, project);
  }

  // --- the API -----------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /** The API lives beside the console: `/console` → `/v1/...` on the same origin. */
  function apiRoot() {
    return location.pathname.replace(/\/console\/?$/, "");
  }

  function enc(value) {
    return encodeURIComponent(String(value));
  }

  async function api(method, path, body) {
    const c = credentials();
    if (!c) throw new ApiError(401, "unauthorized", "not signed in");
    const url = `${apiRoot()}/v1/organizations/${enc(c.org)}/projects/${enc(c.project)}${path}`;
    const init = { method, headers: { Authorization: `Bearer ${c.key}` }, cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let answer;
    try {
      answer = await fetch(url, init);
    } catch (err) {
      throw new ApiError(0, "network_error", `could not reach the API (${err.message})`);
    }
    const text = await answer.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (_) {
        data = text;
      }
    }
    if (!answer.ok) {
      const e = data && typeof data === "object" && data.error ? data.error : null;
      throw new ApiError(
        answer.status,
        e && e.code ? String(e.code) : `http_${answer.status}`,
        e && e.message ? String(e.message) : String(text).slice(0, 300),
      );
    }
    return data;
  }

  /** A list the API answers page by page by size (`nextCursor`), whole: `{name: [...]}`. */
  async function allPages(path, name) {
    const found = [];
    let cursor = null;
    do {
      const page = await api("GET", path + query({ cursor }));
      found.push(...(page[name] || []));
      cursor = page.nextCursor;
    } while (cursor);
    return { [name]: found };
  }

  /** GetRun with every step: a run whose steps do not fit one answer comes in pages. */
  async function getRun(runId) {
    const run = await api("GET", `/runs/${enc(runId)}`);
    let cursor = run.nextStepsCursor;
    delete run.nextStepsCursor;
    while (cursor) {
      const page = await api("GET", `/runs/${enc(runId)}${query({ stepsCursor: cursor })}`);
      run.steps = (run.steps || []).concat(page.steps || []);
      cursor = page.nextStepsCursor;
    }
    return run;
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
    const text = q.toString();
    return text ? `?${text}` : "";
  }

  /**
   * A button that calls the API. Its error appears beside it as the API words it; a 403 leaves
   * it disabled (the key may not do this), anything else lets the user try again.
   */
  function actionButton(label, attrs, action) {
    const msg = h("span", { class: "inline-msg" });
    const button = h("button", Object.assign({ type: "button" }, attrs, { text: label }));
    button.addEventListener("click", async () => {
      button.disabled = true;
      msg.className = "inline-msg muted";
      msg.textContent = "…";
      try {
        const result = await action();
        msg.className = "inline-msg muted";
        msg.textContent = typeof result === "string" ? result : "done";
        button.disabled = false;
      } catch (err) {
        msg.className = "inline-msg error";
        msg.setAttribute("data-testid", "action-error");
        msg.textContent = errorText(err);
        if (err instanceof ApiError && err.status === 403) button.title = err.message;
        else button.disabled = false;
      }
    });
    return h("span", { class: "row" }, button, msg);
  }

  // --- pages and routing -------------------------------------------------------------------

  let view = 0; // bumped on every navigation: late answers for an old page are dropped
  let timer = null;

  function current(v) {
    return v === view;
  }

  function later(v, fn, ms) {
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => {
      timer = null;
      if (current(v) && document.visibilityState !== "hidden") fn();
      else if (current(v)) later(v, fn, ms);
    }, ms);
  }

  const ROUTES = [
    [/^#\/runs\/([^/?]+)$/, (v, m) => pageRun(v, decodeURIComponent(m[1]))],
    [/^#\/runs$/, (v) => pageRuns(v)],
    [/^#\/queues$/, (v) => pageQueues(v)],
    [/^#\/apps$/, (v) => pageApps(v)],
    [/^#\/schedules$/, (v) => pageSchedules(v)],
    [/^#\/subscriptions$/, (v) => pageSubscriptions(v)],
    [/^#\/flows$/, (v) => pageFlows(v)],
    [/^#\/flows\/([^/?]+)$/, (v, m) => pageFlow(v, decodeURIComponent(m[1]))],
    [/^#\/jobs\/([^/?]+)$/, (v, m) => pageJob(v, decodeURIComponent(m[1]))],
  ];

  function route() {
    view += 1;
    if (timer) clearTimeout(timer);
    timer = null;
    showBanner("");
    const v = view;
    const signedIn = credentials();
    document.getElementById("nav").hidden = !signedIn;
    document.getElementById("sign-out").hidden = !signedIn;
    document.getElementById("who").textContent = signedIn ? `project ${signedIn.project}` : "";
    clear(main);
    if (pendingLink) return pageReplaceSession(v, signedIn, pendingLink);
    if (!signedIn) return pageSignIn(v);
    const hash = location.hash || "#/runs";
    for (const a of document.querySelectorAll("#nav a")) {
      a.classList.toggle("active", hash.startsWith(`#/${a.dataset.page}`) ||
        (a.dataset.page === "flows" && hash.startsWith("#/jobs")));
    }
    for (const [pattern, page] of ROUTES) {
      const m = hash.match(pattern);
      if (m) {
        page(v, m).catch((err) => current(v) && main.appendChild(errorBox(err)));
        return undefined;
      }
    }
    location.hash = "#/runs";
    return undefined;
  }

  // --- sign in -----------------------------------------------------------------------------

  function pageSignIn(v) {
    const org = h("input", { name: "org", required: true, autocomplete: "off", spellcheck: "false" });
    const project = h("input", { name: "project", required: true, autocomplete: "off", spellcheck: "false" });
    const key = h("input", { name: "key", type: "password", required: true, autocomplete: "off" });
    const msg = h("div", { class: "error", "data-testid": "signin-error" });
    const form = h(
      "form",
      { "data-testid": "signin" },
      h("label", {}, "Organization ID", org),
      h("label", {}, "Project ID", project),
      h("label", {}, "API key", key),
      h("button", { type: "submit", class: "primary", text: "Sign in" }),
      msg,
      h("p", { class: "muted", text: "The key stays in this browser tab's session storage and is sent only to this API." }),
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      saveCredentials(key.value.trim(), org.value.trim(), project.value.trim());
      try {
        await api("GET", "/apps");
      } catch (err) {
        // A key that may not list apps still signs in; a wrong key or project does not.
        if (err instanceof ApiError && (err.status === 401 || err.status === 404 || err.status === 0)) {
          for (const name of Object.values(STORE)) sessionStorage.removeItem(name);
          msg.textContent = errorText(err);
          return;
        }
      }
      detectFlows();
      location.hash = "#/runs";
      route();
    });
    main.appendChild(h("div", { class: "card signin" }, h("h1", { text: "Sign in" }), form));
    return Promise.resolve(v);
  }

  /** Asked when a sign-in link arrives in a tab that holds another session. */
  function pageReplaceSession(v, held, link) {
    const same = held.org === link.org && held.project === link.project;
    const keep = h("button", { type: "button", class: "primary", "data-testid": "link-keep", text: "Keep my session" });
    const take = h("button", { type: "button", "data-testid": "link-switch", text: "Sign in with the link" });
    keep.addEventListener("click", () => {
      pendingLink = null;
      route();
    });
    take.addEventListener("click", () => {
      pendingLink = null;
      saveCredentials(link.key, link.org, link.project);
      detectFlows();
      location.hash = "#/runs";
      route();
    });
    main.appendChild(h(
      "div",
      { class: "card signin", "data-testid": "replace-session" },
      h("h1", { text: "Replace this tab's session?" }),
      h("p", { text: `This tab is signed in to project ${held.project} (organization ${held.org}).` }),
      h("p", {
        text: same
          ? "The link you opened signs in to the same project with another API key."
          : `The link you opened signs in to project ${link.project} (organization ${link.org}).`,
      }),
      h("p", { class: "muted", text: "Sign in with a link only if you trust whoever gave it to you." }),
      h("div", { class: "row" }, keep, take),
    ));
    return Promise.resolve(v);
  }

  // --- runs --------------------------------------------------------------------------------

  // Kept across navigation so "back" from a run returns to the same filters and page.
  const runsState = { filters: {}, cursors: [], cursor: null, auto: true, limit: PAGE_SIZE };

  async function appNames() {
    try {
      const data = await allPages("/apps", "apps");
      const names = {};
      for (const app of data.apps || []) names[app.id] = app.name;
      return { apps: data.apps || [], names };
    } catch (_) {
      return { apps: [], names: {} };
    }
  }

  function isoOrEmpty(localValue) {
    if (!localValue) return "";
    const d = new Date(localValue);
    return Number.isNaN(d.getTime()) ? "" : d.toISOString();
  }

  async function pageRuns(v) {
    const { apps, names } = await appNames();
    if (!current(v)) return;
    const f = runsState.filters;
    const appSelect = h("select", { name: "appId" }, h("option", { value: "", text: "any app" }),
      apps.map((a) => h("option", { value: a.id, text: a.name, selected: f.appId === a.id })));
    const workflow = h("input", { name: "workflow", value: f.workflow || "", placeholder: "any" });
    const status = h("select", { name: "status" }, h("option", { value: "", text: "any status" }),
      RUN_STATUSES.map((st) => h("option", { value: st, text: st, selected: f.status === st })));
    const runKey = h("input", { name: "runKey", value: f.runKey || "", placeholder: "exact key" });
    const after = h("input", { name: "createdAfter", type: "datetime-local", step: "1", value: f.afterLocal || "" });
    const before = h("input", { name: "createdBefore", type: "datetime-local", step: "1", value: f.beforeLocal || "" });
    const auto = h("input", { type: "checkbox", name: "auto", checked: runsState.auto });
    const limit = h("select", { name: "limit" }, [20, 50, 100].map((n) =>
      h("option", { value: n, text: n, selected: runsState.limit === n })));
    const form = h("form", { class: "filters card", "data-testid": "run-filters" },
      h("label", {}, "App", appSelect), h("label", {}, "Workflow", workflow),
      h("label", {}, "Status", status), h("label", {}, "Run key", runKey),
      h("label", {}, "Created after", after), h("label", {}, "Created before", before),
      h("label", {}, "Per page", limit),
      h("button", { type: "submit", class: "primary", text: "Search" }),
      h("button", { type: "reset", text: "Clear" }),
      h("label", { class: "row" }, h("span", { text: "auto-refresh" }), auto));
    const table = h("div", { "data-testid": "runs" });
    const pager = h("div", { class: "pager" });
    const note = h("span", { class: "muted", "data-testid": "refresh-note" });
    main.append(h("div", { class: "row" }, h("h1", { text: "Runs" }), h("span", { class: "spacer" }), note), form, table, pager);

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      runsState.filters = {
        appId: appSelect.value, workflow: workflow.value.trim(), status: status.value,
        runKey: runKey.value.trim(), afterLocal: after.value, beforeLocal: before.value,
      };
      runsState.limit = Number(limit.value) || PAGE_SIZE;
      runsState.cursors = [];
      runsState.cursor = null;
      load();
    });
    form.addEventListener("reset", () => {
      runsState.filters = {};
      runsState.cursors = [];
      runsState.cursor = null;
      setTimeout(load, 0);
    });
    auto.addEventListener("change", () => {
      runsState.auto = auto.checked;
      load();
    });

    async function load() {
      if (!current(v)) return;
      const fl = runsState.filters;
      let data;
      const asked = performance.now();
      try {
        data = await api("GET", "/runs" + query({
          appId: fl.appId, workflow: fl.workflow, status: fl.status, runKey: fl.runKey,
          createdAfter: isoOrEmpty(fl.afterLocal), createdBefore: isoOrEmpty(fl.beforeLocal),
          limit: runsState.limit, cursor: runsState.cursor,
        }));
      } catch (err) {
        if (!current(v)) return;
        clear(table);
        table.appendChild(errorBox(err));
        return;
      }
      if (!current(v)) return;
      await learnAppNames(data.runs || [], names);
      if (!current(v)) return;
      const answered = performance.now();
      renderRunsTable(table, data.runs || [], names);
      renderPager(pager, data.nextCursor, load);
      void table.offsetHeight; // lay the page out now, so the measure below includes layout
      // Measures for bench/console_render.py: the API's time and the console's own.
      performance.measure("ezgh.runs.api", { start: asked, end: answered });
      performance.measure("ezgh.runs.render", { start: answered, end: performance.now() });
      const moving = (data.runs || []).filter((r) => !ENDED.has(r.status)).length;
      if (runsState.auto && moving > 0) {
        note.textContent = `refreshing: ${moving} run${moving === 1 ? "" : "s"} moving`;
        later(v, load, REFRESH_MS);
      } else {
        note.textContent = "";
      }
    }
    await load();
  }

  // Apps asked for by ID and not found (deleted, or the key may not read them): not again.
  const unnamedApps = new Set();

  /** Runs of an app created after the page read the app names (an app `ezgh dev` registered
   *  meanwhile): read the names again, once per such app, so it is shown by name. */
  async function learnAppNames(runs, names) {
    const missing = runs.map((r) => r.appId).filter((id) => id && !(id in names) && !unnamedApps.has(id));
    if (!missing.length) return;
    Object.assign(names, (await appNames()).names);
    for (const id of missing) if (!(id in names)) unnamedApps.add(id);
  }

  /** An app by name (its ID on hover); by ID only when this key may not read it. */
  function appCell(appId, names) {
    return names[appId]
      ? h("td", { "data-testid": "app-name", title: appId, text: names[appId] })
      : h("td", { class: "mono", "data-testid": "app-name", text: appId || "" });
  }

  function renderRunsTable(container, runs, names) {
    const rows = runs.map((run) => {
      const tr = h("tr", { class: "clickable", "data-run-id": run.id, "data-status": run.status },
        h("td", {}, h("a", { href: `#/runs/${enc(run.id)}`, class: "mono", text: run.id })),
        h("td", { text: run.workflow }),
        appCell(run.appId, names),
        h("td", {}, badge(run.status)),
        h("td", { text: run.attempt }),
        h("td", { class: "mono", text: run.runKey || "" }),
        h("td", {}, fmtTime(run.createdAt)),
        h("td", {}, fmtTime(run.endedAt)));
      tr.addEventListener("click", (event) => {
        if (event.target.tagName !== "A") location.hash = `#/runs/${enc(run.id)}`;
      });
      return tr;
    });
    const table = h("table", {},
      h("thead", {}, h("tr", {}, ["Run", "Workflow", "App", "Status", "Attempt", "Run key", "Created", "Ended"].map((t) => h("th", { text: t })))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 8, class: "muted", text: "No runs match." }))));
    clear(container);
    container.appendChild(table);
  }

  function renderPager(pager, nextCursor, load) {
    clear(pager);
    const page = runsState.cursors.length + 1;
    pager.append(
      h("button", { type: "button", text: "First", disabled: page === 1, onclick: () => {
        runsState.cursors = [];
        runsState.cursor = null;
        load();
      } }),
      h("button", { type: "button", text: "Previous", disabled: page === 1, onclick: () => {
        runsState.cursor = runsState.cursors.pop() || null;
        load();
      } }),
      h("span", { class: "muted", "data-testid": "page-number", text: `page ${page}` }),
      h("button", { type: "button", text: "Next", "data-testid": "next-page", disabled: !nextCursor, onclick: () => {
        runsState.cursors.push(runsState.cursor);
        runsState.cursor = nextCursor;
        load();
      } }),
    );
  }

  // --- one run -----------------------------------------------------------------------------

  const expanded = new Set(); // step IDs whose details are open, across refreshes

  async function pageRun(v, runId) {
    const run = await getRun(runId);
    if (!current(v)) return;
    // A code workflow a flow's job invoked: its parent is a job (GET /jobs), not a run.
    let parentIsJob = false;
    if (run.parentRunId) {
      try {
        await api("GET", `/jobs/${enc(run.parentRunId)}`);
        parentIsJob = true;
      } catch (_) {
        parentIsJob = false;
      }
    }
    const { names } = await appNames();
    if (!current(v)) return;
    run.appName = names[run.appId];
    run.parentIsJob = parentIsJob;
    let events = null;
    let eventsError = null;
    try {
      events = await api("GET", `/runs/${enc(runId)}/events`);
    } catch (err) {
      eventsError = err;
    }
    if (!current(v)) return;
    clear(main);
    main.append(runHeader(run, v), runTimeline(run, events && events.events), runValues(run), runEvents(run, events, eventsError));
    if (!ENDED.has(run.status)) {
      later(v, () => pageRun(v, runId).catch((err) => showBanner(errorText(err))), REFRESH_MS);
    }
  }

  function runHeader(run, v) {
    const refresh = () => {
      if (current(v)) pageRun(v, run.id).catch((err) => showBanner(errorText(err)));
    };
    const cancel = actionButton("Cancel", { class: "danger", "data-testid": "cancel", disabled: run.status !== "running" },
      async () => {
        await api("POST", `/runs/${enc(run.id)}/cancel`);
        setTimeout(refresh, 300);
        return "cancelling";
      });
    const retry = actionButton("Retry", { class: "primary", "data-testid": "retry", disabled: !(run.status === "failed" || run.status === "timedOut") },
      async () => {
        await api("POST", `/runs/${enc(run.id)}/retry`);
        setTimeout(refresh, 300);
        return "retrying";
      });
    const kv = [
      ["Run ID", h("span", { class: "mono", text: run.id })],
      ["Status", h("span", { "data-testid": "run-status" }, badge(run.status))],
      ["Attempt", h("span", { "data-testid": "run-attempt", text: run.attempt })],
      ["App", run.appName ? h("span", { "data-testid": "run-app", title: run.appId, text: run.appName }) : h("span", { class: "mono", "data-testid": "run-app", text: run.appId })],
      ["Run key", run.runKey ? h("span", { class: "mono", text: run.runKey }) : null],
      [run.parentIsJob ? "Parent job" : "Parent run", run.parentRunId ? h("a", { href: `#/${run.parentIsJob ? "jobs" : "runs"}/${enc(run.parentRunId)}`, class: "mono", "data-testid": "parent-link", text: run.parentRunId }) : null],
      ["Schedule", run.scheduleId ? h("span", { class: "mono", text: run.scheduleId }) : null],
      ["Created", fmtTime(run.createdAt)],
      ["Started", fmtTime(run.startedAt)],
      ["Ended", fmtTime(run.endedAt)],
      ["Duration", run.startedAt ? fmtDuration((run.endedAt ? Date.parse(run.endedAt) : Date.now()) - Date.parse(run.startedAt)) : null],
    ].filter(([, value]) => value !== null);
    const children = (run.steps || []).filter((st) => st.childRunId);
    if (children.length) {
      kv.push(["Child runs", h("span", {}, children.map((st) =>
        h("a", { href: `#/runs/${enc(st.childRunId)}`, class: "mono", "data-testid": "child-link", text: `${st.name} → ${st.childRunId} ` })))]);
    }
    // A waiting callback's URL (GetRun shows it to a key that may complete it): a POST of a
    // JSON body to it completes the callback.
    const callbacks = (run.steps || []).filter((st) => st.kind === "callback" && st.url && st.status === "waiting");
    if (callbacks.length) {
      kv.push(["Callbacks", h("span", {}, callbacks.map((st) =>
        h("div", { "data-testid": "callback-url" }, `${st.name}: POST `, h("span", { class: "mono", text: st.url }))))]);
    }
    return h("div", { class: "card" },
      h("div", { class: "row" }, h("a", { href: "#/runs", text: "← Runs" })),
      h("div", { class: "row" }, h("h1", { "data-testid": "run-title", text: run.workflow }), badge(run.status),
        h("span", { class: "spacer" }), cancel, retry,
        h("button", { type: "button", text: "Refresh", onclick: refresh })),
      h("dl", { class: "kv" }, kv.map(([k, value]) => [h("dt", { text: k }), h("dd", {}, value)])));
  }

  /**
   * A step's failed attempts and their backoffs, from the run's `step.retrying` events:
   * `{stepId: [{failedAt, until, attempt, error}]}`. `until` is when the next attempt was due
   * (the event's `retryAt`; an older event without it: the next failure, else the step's
   * latest start).
   */
  function retriesByStep(run, events) {
    const found = {};
    for (const ev of events || []) {
      if (ev.type !== "step.retrying" || !ev.stepId) continue;
      (found[ev.stepId] = found[ev.stepId] || []).push({
        failedAt: Date.parse(ev.at), until: ev.retryAt ? Date.parse(ev.retryAt) : NaN,
        attempt: ev.stepAttempt, error: ev.error,
      });
    }
    for (const st of run.steps || []) {
      const list = found[st.id] || [];
      list.forEach((r, i) => {
        if (!Number.isNaN(r.until)) return;
        const next = list[i + 1] ? list[i + 1].failedAt : (st.wakeAt ? Date.parse(st.wakeAt) : Date.parse(st.startedAt));
        r.until = Number.isNaN(next) || next < r.failedAt ? r.failedAt : next;
      });
    }
    return found;
  }

  /** Where a time falls on the run's axis, in percent. */
  function axis(start, span) {
    return (ms) => `${(100 * (ms - start)) / span}%`;
  }

  /** What the timeline says when a run has no steps: an ended run will never have any. */
  const NO_STEPS = {
    completed: "No steps: the workflow completed without one.",
    failed: "No steps: the run failed before its first step (its error is below).",
    cancelled: "No steps: the run was cancelled before its first step.",
    timedOut: "No steps: the run timed out before its first step.",
  };

  function runTimeline(run, events) {
    const steps = run.steps || [];
    const retries = retriesByStep(run, events);
    const times = [];
    const t = (iso) => (iso ? Date.parse(iso) : NaN);
    for (const st of steps) {
      if (!Number.isNaN(t(st.startedAt))) times.push(t(st.startedAt));
      if (!Number.isNaN(t(st.endedAt))) times.push(t(st.endedAt));
      for (const r of retries[st.id] || []) times.push(r.failedAt, r.until);
    }
    const now = Date.now();
    const start = Math.min(t(run.startedAt) || t(run.createdAt) || now, ...times);
    const end = Math.max(run.endedAt ? t(run.endedAt) : now, ...times, start + 1);
    const at = axis(start, end - start);
    const lanes = steps.map((st, i) => {
      const failed = retries[st.id] || [];
      const last = failed[failed.length - 1];
      // A step waiting for its next attempt has run nothing since its last failure.
      const waiting = st.status === "retrying" && last && Date.parse(st.startedAt || "") <= last.failedAt;
      const s0 = Number.isNaN(t(st.startedAt)) ? null : t(st.startedAt);
      const s1 = waiting ? last.failedAt
        : Number.isNaN(t(st.endedAt)) ? (ENDED.has(run.status) ? s0 : now) : t(st.endedAt);
      const bar = h("div", { class: `bar k-${st.kind} st-${st.status}`, title: `${st.kind} ${st.status}` });
      if (s0 !== null) {
        bar.style.left = at(s0);
        bar.style.width = `${Math.max(0.4, parseFloat(at((s1 || s0))) - parseFloat(at(s0)))}%`;
      } else {
        bar.style.left = "0";
        bar.style.width = "0";
      }
      const track = h("div", { class: "track" }, retryMarks(failed, at), bar);
      const retried = (st.attempt || 1) - 1;
      const backoffMs = failed.reduce((sum, r) => sum + (r.until - r.failedAt), 0);
      const waitNote = WAIT_KINDS.has(st.kind)
        ? ({ sleep: "sleep", callback: "waits for a callback", message: "waits for a message", invoke: "waits for a child run" })[st.kind]
        : null;
      const lane = h("div", { class: "lane clickable", "data-testid": "step", "data-step-name": st.name, "data-kind": st.kind, "data-status": st.status },
        h("span", { class: "muted", text: String(i + 1) }),
        h("span", { class: "name", title: `${st.kind} ${st.name}` },
          h("span", { class: "kind", "data-testid": "step-kind", text: st.kind }),
          h("span", { class: "step-name", "data-testid": "step-name", text: st.name })),
        track,
        h("span", { class: "meta" }, badge(st.status), " attempt ", String(st.attempt || 1),
          retried > 0 ? h("span", { class: "retry-mark", "data-testid": "retries", text: ` · ${retried} retr${retried === 1 ? "y" : "ies"}` }) : null,
          failed.length ? h("span", { class: "muted", "data-testid": "backoff-total", text: ` · ${fmtDuration(backoffMs)} in backoff` }) : null,
          " · ", s0 !== null ? fmtDuration((s1 || s0) - s0) : "not started",
          waitNote ? h("span", { class: "muted", text: ` · ${waitNote}` }) : null,
          st.wakeAt ? h("span", {}, waiting ? " next attempt " : " until ", fmtTime(st.wakeAt)) : null));
      const detail = h("div", { class: "detail" });
      const fill = () => {
        clear(detail);
        append(detail, [
          h("div", { class: "meta" }, "started ", fmtTime(st.startedAt), " · ended ", fmtTime(st.endedAt), " · step ", h("span", { class: "mono", text: st.id })),
          failed.length ? h("div", { class: "meta", "data-testid": "attempts" }, failed.map((r) =>
            h("div", {}, `attempt ${r.attempt || "?"} failed at `, fmtTime(new Date(r.failedAt).toISOString()),
              `${r.error && r.error.message ? ` (${r.error.message})` : ""}; waited ${fmtDuration(r.until - r.failedAt)}`))) : null,
          st.error ? h("div", {}, h("h2", { text: "Error" }), jsonBlock(st.error, "step-error")) : null,
          st.outputRef ? payloadLoader(run.id, st.outputRef, "Output") : ("output" in st ? h("div", {}, h("h2", { text: "Output" }), jsonBlock(st.output, "step-output")) : null),
        ]);
      };
      const wrap = h("div", {}, lane);
      if (expanded.has(st.id)) {
        fill();
        wrap.appendChild(detail);
      }
      lane.addEventListener("click", () => {
        if (expanded.has(st.id)) {
          expanded.delete(st.id);
          detail.remove();
        } else {
          expanded.add(st.id);
          fill();
          wrap.appendChild(detail);
        }
      });
      return wrap;
    });
    const empty = NO_STEPS[run.status] || "No steps yet.";
    return h("div", { class: "card timeline", "data-testid": "timeline" },
      h("h2", { text: `Steps (${steps.length})` }),
      lanes.length ? lanes : h("p", { class: "muted", "data-testid": "no-steps", text: empty }));
  }

  /** A step's failed attempts on its track: a tick where each failed, then its backoff
   *  (hatched) until the next attempt was due. */
  function retryMarks(failed, at) {
    return failed.map((r) => {
      const waited = r.until - r.failedAt;
      const title = `attempt ${r.attempt || "?"} failed${r.error && r.error.message ? `: ${r.error.message}` : ""}; backoff ${fmtDuration(waited)}`;
      const mark = h("div", { class: "failed-attempt", title });
      mark.style.left = at(r.failedAt);
      const backoff = h("div", { class: "backoff", "data-testid": "backoff", "data-ms": String(Math.round(waited)), title });
      backoff.style.left = at(r.failedAt);
      backoff.style.width = `${Math.max(0.4, parseFloat(at(r.until)) - parseFloat(at(r.failedAt)))}%`;
      return [backoff, mark];
    });
  }

  /** A large value stored outside the run (or job: `base` "jobs"), read on demand with its
   * payloads route. */
  function payloadLoader(runId, ref, title, base = "runs") {
    const out = h("div", {});
    const path = String(typeof ref === "object" && ref !== null ? ref.path || ref.key || "" : ref);
    const button = actionButton(`Load ${title.toLowerCase()} (stored separately)`, { "data-testid": "load-payload" }, async () => {
      // An outputRef is already percent-encoded: keep its escapes (and slashes) as they are.
      const encoded = path.split("/").map((seg) => seg.split("%").map(enc).join("%")).join("/");
      const value = await api("GET", `/${base}/${enc(runId)}/payloads/${encoded}`);
      clear(out);
      out.appendChild(jsonBlock(value, "payload"));
      return "loaded";
    });
    return h("div", {}, h("h2", { text: title }), h("div", { class: "muted mono", text: `ref: ${path}` }), button, out);
  }

  function runValues(run) {
    const blocks = [run.inputRef ? payloadLoader(run.id, run.inputRef, "Input")
      : h("div", {}, h("h2", { text: "Input" }), jsonBlock(run.input, "run-input"))];
    if (run.outputRef) blocks.push(payloadLoader(run.id, run.outputRef, "Output"));
    else if ("output" in run) blocks.push(h("div", {}, h("h2", { text: "Output" }), jsonBlock(run.output, "run-output")));
    if (run.error) blocks.push(h("div", {}, h("h2", { text: "Error" }), jsonBlock(run.error, "run-error")));
    return h("div", { class: "card grid2" }, blocks);
  }

  function runEvents(run, data, err) {
    const card = h("div", { class: "card", "data-testid": "events" }, h("h2", { text: "Events" }));
    if (err) {
      card.appendChild(errorBox(err));
      return card;
    }
    const body = h("tbody", {});
    const known = new Set(["id", "type", "at", "attempt", "stepId", "deploymentId"]);
    const addRows = (events) => {
      for (const ev of events) {
        const extra = {};
        for (const [k, val] of Object.entries(ev)) if (!known.has(k)) extra[k] = val;
        body.appendChild(h("tr", { "data-testid": "event" },
          h("td", {}, fmtTime(ev.at)), h("td", {}, h("span", { class: "mono", text: ev.type })),
          h("td", { text: ev.attempt === undefined ? "" : ev.attempt }),
          h("td", { class: "mono", text: ev.stepId || "" }),
          h("td", { class: "mono", "data-testid": "deployment", text: ev.deploymentId || "—" }),
          h("td", { class: "mono", text: Object.keys(extra).length ? JSON.stringify(extra) : "" })));
      }
    };
    addRows(data.events || []);
    const more = h("div", { class: "pager" });
    const addMore = (cursor) => {
      clear(more);
      if (!cursor) return;
      more.appendChild(actionButton("More events", {}, async () => {
        const next = await api("GET", `/runs/${enc(run.id)}/events${query({ cursor })}`);
        addRows(next.events || []);
        addMore(next.nextCursor);
        return "";
      }));
    };
    addMore(data.nextCursor);
    card.append(h("table", {},
      h("thead", {}, h("tr", {}, ["At", "Type", "Attempt", "Step", "Deployment", "Details"].map((x) => h("th", { text: x })))),
      body), more);
    // An invocation's and a step's events name the deployment that ran them, when its app
    // reports one; the run's own events (started, ended) never do.
    if (!(data.events || []).some((ev) => ev.deploymentId)) {
      card.append(h("p", { class: "muted", "data-testid": "no-deployment", text:
        "No event names a deployment: the app reported no deployment ID. Set one with " +
        "PushApp(deployment_id=…) or EZGH_DEPLOYMENT_ID (on Lambda, Vercel, Cloud Run, Fly.io " +
        "and Render the platform's own ID is read); ezgh dev names the code of its --app apps." }));
    }
    return card;
  }

  // --- queues, apps, schedules, subscriptions -----------------------------------------------

  function table(headers, rows, empty) {
    return h("table", {},
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", { text: x })))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length, class: "muted", text: empty }))));
  }

  async function pageQueues(v) {
    const data = await allPages("/queues", "queues");
    if (!current(v)) return;
    const queues = data.queues || [];
    main.appendChild(h("h1", { text: "Queues" }));
    main.appendChild(table(["Name", "ID", "FIFO", "Max receives", "Visibility", "Created", "Dead letters"],
      queues.map((q) => h("tr", { "data-testid": "queue", "data-queue-name": q.name },
        h("td", { text: q.name }), h("td", { class: "mono", text: q.id }), h("td", { text: q.fifo ? "yes" : "no" }),
        h("td", { text: q.maxReceiveCount }), h("td", { text: `${q.visibilityTimeoutSeconds} s` }), h("td", {}, fmtTime(q.createdAt)),
        h("td", {}, actionButton("Redrive", { "data-testid": "redrive" }, async () => {
          const moved = await api("POST", `/queues/${enc(q.id)}/redrive`);
          return `moved ${moved.moved}, ${moved.remaining} left in the dead-letter queue`;
        })))),
      "No queues."));
    main.appendChild(h("p", { class: "muted", text: "The API does not count waiting messages; Redrive says how many dead letters it moved back." }));
    if (queues.length) main.appendChild(sendForm(queues));
  }

  function sendForm(queues) {
    const queue = h("select", { name: "queue" }, queues.map((q) => h("option", { value: q.id, text: q.name })));
    const body = h("textarea", { name: "body", placeholder: "message body (text)" });
    const attributes = h("input", { name: "attributes", placeholder: '{"orderKey": "order:1"}' });
    const groupId = h("input", { name: "groupId", placeholder: "FIFO only" });
    const msg = h("div", { class: "inline-msg", "data-testid": "send-result" });
    const form = h("form", { class: "card filters", "data-testid": "send" },
      h("label", {}, "Queue", queue), h("label", {}, "Body", body), h("label", {}, "Attributes (JSON)", attributes),
      h("label", {}, "Group ID", groupId), h("button", { type: "submit", class: "primary", text: "Send message" }), msg);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const message = { body: body.value };
      try {
        if (attributes.value.trim()) message.attributes = JSON.parse(attributes.value);
      } catch (err) {
        msg.className = "inline-msg error";
        msg.textContent = `attributes: not JSON (${err.message})`;
        return;
      }
      if (groupId.value.trim()) message.groupId = groupId.value.trim();
      try {
        const sent = await api("POST", `/queues/${enc(queue.value)}/messages`, { messages: [message] });
        msg.className = "inline-msg";
        msg.textContent = `sent: ${(sent.messages || []).map((m) => m.messageId).join(", ")}`;
      } catch (err) {
        msg.className = "inline-msg error";
        msg.textContent = errorText(err);
      }
    });
    return h("div", {}, h("h2", { text: "Send a message" }), form);
  }

  async function pageApps(v) {
    const data = await allPages("/apps", "apps");
    if (!current(v)) return;
    main.appendChild(h("h1", { text: "Apps" }));
    main.appendChild(table(["Name", "Kind", "Status", "Workflows", "URL", "Created", ""],
      (data.apps || []).map((a) => h("tr", { "data-testid": "app", "data-app-name": a.name },
        h("td", {}, h("div", { text: a.name }), h("div", { class: "muted mono", text: a.slug || a.id })),
        h("td", { text: a.kind }), h("td", {}, badge(a.status)),
        h("td", {}, (a.workflows || []).map((w) => h("div", { class: "mono", text: w }))),
        h("td", { class: "mono", text: a.url || "" }), h("td", {}, fmtTime(a.createdAt)),
        h("td", {}, a.kind === "push" ? actionButton("Sync", { "data-testid": "sync" }, async () => {
          const synced = await api("POST", `/apps/${enc(a.id)}/sync`);
          return `${synced.status}: ${(synced.workflows || []).length} workflows`;
        }) : null))),
      "No apps."));
  }

  async function pageSchedules(v) {
    const data = await allPages("/schedules", "schedules");
    const { names } = await appNames();
    if (!current(v)) return;
    const reload = () => current(v) && route();
    main.appendChild(h("h1", { text: "Schedules" }));
    main.appendChild(table(["Schedule", "App", "Workflow", "Cron", "Timezone", "Next run", "State", ""],
      (data.schedules || []).map((sc) => {
        const paused = sc.paused === true || sc.state === "paused" || sc.status === "paused";
        return h("tr", { "data-testid": "schedule" },
          h("td", { class: "mono", text: sc.slug || sc.id }), appCell(sc.appId, names), h("td", { text: sc.workflow }),
          h("td", { class: "mono", text: sc.cron }), h("td", { text: sc.timezone || "UTC" }),
          h("td", {}, fmtTime(sc.nextRunAt)), h("td", {}, badge(paused ? "paused" : "active")),
          h("td", {}, actionButton(paused ? "Resume" : "Pause", {}, async () => {
            await api("POST", `/schedules/${enc(sc.id)}/${paused ? "resume" : "pause"}`);
            setTimeout(reload, 200);
            return "";
          })));
      }),
      "No schedules."));
  }

  /** A subscription's target in words, apps and flows by name (`names`: ID → name). */
  function describeTarget(t, names) {
    if (!t || typeof t !== "object") return String(t);
    const key = t.correlationAttribute ? `, key ${t.correlationAttribute}` : "";
    if (t.kind === "https") return `https → ${t.url}`;
    if (t.kind === "workflow") return `workflow ${t.mode}: ${t.workflow} (app ${names[t.appId] || t.appId})${key}`;
    if (t.kind === "flow") return `flow ${t.mode}: ${names[t.flowId] || t.flowId}${key}`;
    return JSON.stringify(t);
  }

  /** Flow ID → name, for the flows this key may read (none when it may read none). */
  async function flowNames() {
    try {
      const data = await allPages("/flows", "flows");
      const names = {};
      for (const fl of data.flows || []) names[fl.id] = fl.name;
      return names;
    } catch (_) {
      return {};
    }
  }

  async function pageSubscriptions(v) {
    const data = await allPages("/subscriptions", "subscriptions");
    const names = { ...(await appNames()).names, ...(await flowNames()) };
    if (!current(v)) return;
    const reload = () => current(v) && route();
    main.appendChild(h("h1", { text: "Subscriptions" }));
    main.appendChild(table(["Subscription", "Queue", "Target", "State", "Status", "Last failure", ""],
      (data.subscriptions || []).map((sub) => {
        const paused = sub.paused === true || sub.state === "paused";
        return h("tr", { "data-testid": "subscription" },
          h("td", { class: "mono", text: sub.id }), h("td", { class: "mono", text: sub.queueId }),
          h("td", { "data-testid": "sub-target", text: describeTarget(sub.target, names) }), h("td", {}, badge(sub.state || (paused ? "paused" : "active"))),
          h("td", { "data-testid": "sub-status", text: sub.status }),
          h("td", {}, sub.lastFailure ? jsonBlock(sub.lastFailure) : h("span", { class: "muted", text: "—" })),
          h("td", {}, actionButton(paused ? "Resume" : "Pause", {}, async () => {
            await api("POST", `/subscriptions/${enc(sub.id)}/${paused ? "resume" : "pause"}`);
            setTimeout(reload, 200);
            return "";
          })));
      }),
      "No subscriptions."));
  }

  // --- flows (only when the API has them) --------------------------------------------------

  async function detectFlows() {
    try {
      await api("GET", "/flows");
      document.getElementById("nav-flows").hidden = false;
    } catch (err) {
      // 404: this engine has no flows; anything else (403) still means the page exists.
      document.getElementById("nav-flows").hidden = err instanceof ApiError && err.status === 404;
    }
  }

  async function pageFlows(v) {
    const data = await allPages("/flows", "flows");
    if (!current(v)) return;
    main.appendChild(h("h1", { text: "Flows" }));
    main.appendChild(table(["Flow", "Branch", "Created"],
      (data.flows || []).map((fl) => h("tr", { "data-testid": "flow" },
        h("td", {}, h("a", { href: `#/flows/${enc(fl.id)}`, "data-testid": "flow-link", text: fl.name }),
          h("div", { class: "muted mono", text: fl.slug || fl.id })),
        h("td", { text: fl.activeBranch || "" }), h("td", {}, fmtTime(fl.createdAt)))),
      "No flows."));
    main.appendChild(h("h2", { text: "Jobs" }));
    let jobs;
    try {
      jobs = await api("GET", `/jobs${query({ limit: PAGE_SIZE })}`);
    } catch (err) {
      main.appendChild(errorBox(err));
      return;
    }
    if (!current(v)) return;
    const flowName = {};
    for (const fl of data.flows || []) flowName[fl.id] = fl.name;
    main.appendChild(table(["Job", "Flow", "Status", "Tracking ID", "Started", "Finished"],
      (jobs.jobs || []).map((j) => h("tr", { "data-testid": "job" },
        h("td", {}, h("a", { href: `#/jobs/${enc(j.id)}`, class: "mono", text: j.id })),
        h("td", { "data-testid": "job-flow" }, flowName[j.flowId]
          ? h("a", { href: `#/flows/${enc(j.flowId)}`, title: j.flowId, text: flowName[j.flowId] })
          : h("span", { class: "mono", text: j.flowId })),
        h("td", {}, badge(j.status)),
        h("td", { class: "mono", text: j.trackingId || "" }), h("td", {}, fmtTime(j.startedAt)), h("td", {}, fmtTime(j.finishedAt)))),
      "No jobs."));
    const failed = await failedItems(v);
    if (failed && current(v)) main.append(h("h2", { text: "Failed items" }), failed);
  }

  /** A flow: its commits (newest first), the chosen one drawn as its graph (default: the
   *  active branch's latest), and a node's config on click. */
  async function pageFlow(v, flowId) {
    const flow = await api("GET", `/flows/${enc(flowId)}`);
    const data = await api("GET", `/flows/${enc(flow.id)}/commits${query({ limit: PAGE_SIZE })}`);
    if (!current(v)) return;
    const commits = data.commits || [];
    const shown = h("div", { class: "card", "data-testid": "commit-graph" });
    const detail = h("div", { class: "card", "data-testid": "node-detail" });
    const show = (commit) => {
      clear(shown);
      clear(detail);
      append(detail, [h("span", { class: "muted", text: "Click a node to see its config." })]);
      append(shown, [h("h2", { text: `Commit ${commit.id} on ${commit.branch}` }),
        commit.message ? h("p", { text: commit.message }) : null,
        flowGraph(commit.graph || { nodes: [], edges: [] }, {}, (node) => {
          clear(detail);
          append(detail, [h("h2", { text: `${node.label || node.id} (${node.moduleType})` }), jsonBlock(node.config || {})]);
        })]);
    };
    main.append(
      h("div", { class: "card" }, h("a", { href: "#/flows", text: "← Flows" }),
        h("div", { class: "row" }, h("h1", { "data-testid": "flow-title", text: flow.name })),
        h("dl", { class: "kv" }, [["ID", flow.id], ["Active branch", flow.activeBranch], ["Description", flow.description || ""]]
          .map(([k, val]) => [h("dt", { text: k }), h("dd", { class: "mono", text: val || "" })]))),
      table(["Commit", "Branch", "Message", "Created"], commits.map((c) => h("tr", { "data-testid": "commit", "data-commit-id": c.id },
        h("td", {}, h("button", { type: "button", class: "mono", "data-testid": "show-commit", text: c.id, onclick: () => show(c) })),
        h("td", { text: c.branch }), h("td", { text: c.message || "" }), h("td", {}, fmtTime(c.createdAt)))), "No commits."),
      shown, detail);
    const head = commits.find((c) => c.branch === flow.activeBranch) || commits[0];
    if (head) show(head);
  }

  /** Failed items (a node that gave up), each with Retry: the job resumes from that node. */
  async function failedItems(v) {
    let data;
    try {
      data = await api("GET", `/failedItems${query({ limit: PAGE_SIZE })}`);
    } catch (err) {
      return errorBox(err);
    }
    if (!current(v)) return null;
    return table(["Failed item", "Job", "Node", "Error", "Attempts", "Created", ""],
      (data.failedItems || data.items || []).map((it) => h("tr", { "data-testid": "failed-item" },
        h("td", { class: "mono", text: it.id }),
        h("td", {}, h("a", { href: `#/jobs/${enc(it.jobId)}`, class: "mono", text: it.jobId })),
        h("td", { text: `${it.nodeId} (${it.moduleType})` }),
        h("td", { text: it.error ? `${it.error.code || ""} ${it.error.message || ""}`.trim() : "" }),
        h("td", { text: it.attempts }), h("td", {}, fmtTime(it.createdAt)),
        h("td", {}, it.retriedAt ? h("span", { class: "muted", text: "retried" }) :
          actionButton("Retry", { "data-testid": "retry-item" }, async () => {
            await api("POST", `/failedItems/${enc(it.id)}/retry`);
            return "retrying";
          })))),
      "No failed items.");
  }

  async function pageJob(v, jobId) {
    const job = await api("GET", `/jobs/${enc(jobId)}`);
    if (!current(v)) return;
    let graph = { nodes: [], edges: [] };
    let flowName = null;
    try {
      flowName = (await api("GET", `/flows/${enc(job.flowId)}`)).name;
    } catch (_) {
      flowName = null; // a deleted flow's job shows the flow's ID
    }
    try {
      const commits = await api("GET", `/flows/${enc(job.flowId)}/commits${query({ branch: job.branch })}`);
      const commit = (commits.commits || []).find((c) => c.id === job.commitId);
      if (commit && commit.graph) graph = commit.graph;
    } catch (err) {
      main.appendChild(errorBox(err));
    }
    if (!current(v)) return;
    const byNode = {};
    for (const a of job.actions || []) byNode[a.nodeId] = a;
    const detail = h("div", { class: "card", "data-testid": "action-detail" }, h("span", { class: "muted", text: "Click a node to see its input and output." }));
    const showAction = (node) => {
      const a = byNode[node.id];
      clear(detail);
      append(detail, [h("h2", { text: `${node.label || node.id} (${node.moduleType})` }),
        a ? [h("div", {}, badge(a.status), ` attempt ${a.attempt || 1}`),
          // A sub-flow's child is a job, a code workflow's a run: link to the one it started.
          a.childJobId ? h("div", {}, "child job ", h("a", { href: `#/jobs/${enc(a.childJobId)}`, class: "mono", "data-testid": "child-job-link", text: a.childJobId })) : null,
          a.childRunId ? h("div", {}, "child run ", h("a", { href: `#/runs/${enc(a.childRunId)}`, class: "mono", "data-testid": "child-run-link", text: a.childRunId })) : null,
          a.inputRef ? payloadLoader(job.id, a.inputRef, "Input", "jobs") : [h("h2", { text: "Input" }), jsonBlock(a.input)],
          a.outputRef ? payloadLoader(job.id, a.outputRef, "Output", "jobs")
            : "output" in a ? [h("h2", { text: "Output" }), jsonBlock(a.output)] : null,
          a.error ? [h("h2", { text: "Error" }), jsonBlock(a.error)] : null]
          : h("p", { class: "muted", text: "This node has not run." })]);
    };
    main.append(
      h("div", { class: "card" }, h("a", { href: "#/flows", text: "← Flows" }),
        h("div", { class: "row" }, h("h1", { text: `Job ${job.id}` }), badge(job.status)),
        h("dl", { class: "kv" }, [h("dt", { text: "Flow" }), h("dd", { "data-testid": "job-flow" }, flowName
          ? h("a", { href: `#/flows/${enc(job.flowId)}`, title: job.flowId, text: flowName })
          : h("span", { class: "mono", text: job.flowId }))],
          [["Commit", job.commitId], ["Branch", job.branch], ["Tracking ID", job.trackingId]]
            .map(([k, val]) => [h("dt", { text: k }), h("dd", { class: "mono", text: val || "" })]),
          job.parentJobId ? [h("dt", { text: "Parent job" }), h("dd", {}, h("a", { href: `#/jobs/${enc(job.parentJobId)}`, class: "mono", "data-testid": "parent-job-link", text: job.parentJobId }))] : null)),
      h("div", { class: "card" }, flowGraph(graph, byNode, showAction)), detail,
      h("div", { class: "card grid2" }, job.inputRef ? payloadLoader(job.id, job.inputRef, "Input", "jobs")
        : h("div", {}, h("h2", { text: "Input" }), jsonBlock(job.input)),
        job.outputRef ? payloadLoader(job.id, job.outputRef, "Output", "jobs")
          : "output" in job ? h("div", {}, h("h2", { text: "Output" }), jsonBlock(job.output)) : null,
        job.error ? h("div", {}, h("h2", { text: "Error" }), jsonBlock(job.error)) : null));
    if (job.status === "RUNNING" || job.status === "WAITING") later(v, () => route(), REFRESH_MS);
  }

  /** A commit's graph as SVG: nodes in layers by longest path from a source, edges as curves. */
  function flowGraph(graph, byNode, onPick) {
    const nodes = graph.nodes || [];
    const edges = (graph.edges || []).filter((e) => nodes.some((n) => n.id === e.source) && nodes.some((n) => n.id === e.target));
    const layer = {};
    for (const n of nodes) layer[n.id] = 0;
    // Longest-path layering; at most |nodes| rounds, so a cycle cannot hang the page.
    for (let round = 0; round < nodes.length; round += 1) {
      let changed = false;
      for (const e of edges) {
        if (layer[e.target] < layer[e.source] + 1 && layer[e.source] + 1 < nodes.length) {
          layer[e.target] = layer[e.source] + 1;
          changed = true;
        }
      }
      if (!changed) break;
    }
    const columns = {};
    for (const n of nodes) (columns[layer[n.id]] = columns[layer[n.id]] || []).push(n);
    const W = 170, H = 46, GX = 70, GY = 24, PAD = 16;
    const pos = {};
    let maxRows = 1;
    for (const [col, list] of Object.entries(columns)) {
      maxRows = Math.max(maxRows, list.length);
      list.forEach((n, row) => { pos[n.id] = { x: PAD + Number(col) * (W + GX), y: PAD + row * (H + GY) }; });
    }
    const cols = Object.keys(columns).length || 1;
    const width = PAD * 2 + cols * W + (cols - 1) * GX;
    const height = PAD * 2 + maxRows * H + (maxRows - 1) * GY;
    const root = s("svg", { class: "graph", "data-testid": "flow-graph", width, height, viewBox: `0 0 ${width} ${height}` },
      s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
        s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9aa6bd" }))));
    for (const e of edges) {
      const a = pos[e.source], b = pos[e.target];
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
      root.appendChild(s("path", { class: "edge", "marker-end": "url(#arrow)", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` },
        s("title", { text: `${e.source}${e.sourceHandle ? `.${e.sourceHandle}` : ""} → ${e.target}` })));
      if (e.sourceHandle) { // a condition's `true` / `false`: which way the edge leaves it
        root.appendChild(s("text", { class: `edge-label h-${String(e.sourceHandle).replace(/[^A-Za-z]/g, "")}`, "data-testid": "edge-label",
          x: x1 + 6, y: y1 + (y2 < y1 ? -6 : y2 > y1 ? 14 : -6), text: String(e.sourceHandle) }));
      }
    }
    for (const n of nodes) {
      const p = pos[n.id];
      const action = byNode[n.id];
      const status = action ? String(action.status) : "";
      const g = s("g", { class: `node s-${status.replace(/[^A-Za-z]/g, "")}`, "data-node-id": n.id, "data-status": status, transform: `translate(${p.x},${p.y})` },
        s("rect", { width: W, height: H, rx: 6 }),
        s("text", { x: 10, y: 19, text: String(n.label || n.id).slice(0, 24) }),
        s("text", { x: 10, y: 36, class: "sub", text: `${n.moduleType}${status ? ` · ${status}` : ""}`.slice(0, 30) }));
      g.addEventListener("click", () => onPick(n));
      root.appendChild(g);
    }
    return root;
  }

  // --- start ---------------------------------------------------------------------------------

  document.getElementById("sign-out").addEventListener("click", signOut);
  window.addEventListener("hashchange", () => {
    takeFragmentCredentials();
    route();
  });
  takeFragmentCredentials();
  if (credentials()) detectFlows();
  route();
})();
