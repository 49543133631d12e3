// The changestream console: one page, hash routes, the server's own HTTP API.
// The token lives in this tab's sessionStorage and goes only in the Authorization header
// (never a URL, never a cookie: fetch sends no credentials), which keeps the page CSRF-safe.
// Every text from the server enters the page through textContent, never as HTML.
"use strict";

const TOKEN_KEY = "changestream.token";
const SVG_NS = "http://www.w3.org/2000/svg";
const TAIL_ROWS = 200;
const TABLE_ROWS = 300;

const session = { scopes: [], authenticated: false };
let view = { timers: [], aborts: [] };

// -- small helpers -----------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function s(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setAttrs(node, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
}

function table(headers, rows, attrs) {
  return h("table", attrs,
    h("thead", null, h("tr", null, headers.map((name) =>
      h("th", { scope: "col", class: name.num ? "num" : null }, name.label || name)))),
    h("tbody", null, rows));
}

function short(token) {
  return token ? "…" + token.slice(-10) : "-";
}

// RFC 3339 text with microseconds as milliseconds since the epoch.
function tsMs(text) {
  if (!text) return null;
  const match = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?Z$/.exec(text);
  if (!match) return Date.parse(text);
  const fraction = (match[2] || "").padEnd(6, "0").slice(0, 6);
  return Date.parse(match[1] + "Z") + Number(fraction) / 1000;
}

function ago(text) {
  const ms = tsMs(text);
  if (ms === null) return "never";
  const seconds = Math.max(0, (Date.now() - ms) / 1000);
  return seconds < 90 ? seconds.toFixed(1) + " s ago" : Math.round(seconds / 60) + " min ago";
}

function seconds(value) {
  return value === null || value === undefined ? "-" : value.toFixed(1) + " s";
}

function typeText(type) {
  if (type.code === "ARRAY") return "ARRAY<" + typeText(type.array_element_type) + ">";
  return type.length ? type.code + "(" + type.length + ")" : type.code;
}

function rate(value) {
  return value === null || value === undefined ? "-" : value.toLocaleString("en", { maximumFractionDigits: 1 });
}

function say(text, isError) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.classList.toggle("error", Boolean(isError));
}

function db(name) {
  return "/v1/databases/" + encodeURIComponent(name);
}

function streamPath(database, stream) {
  return db(database) + "/streams/" + encodeURIComponent(stream);
}

// -- the API -----------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, options = {}) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: options.signal,
    cache: "no-store",
    credentials: "omit",
  });
  if (response.status === 401) {
    showLogin("The server did not accept the token: " + (await errorText(response)));
    throw new ApiError(401, "not signed in");
  }
  if (!response.ok) throw new ApiError(response.status, await errorText(response));
  if (options.stream) return response;
  return response.json();
}

async function errorText(response) {
  try {
    const body = await response.json();
    return body.error ? body.error.message : response.statusText;
  } catch {
    return response.status + " " + response.statusText;
  }
}

// Poll ``work`` every ``ms`` while the view of ``body`` is shown; errors go to the status
// line. A view left while it was still fetching what it shows starts no polling.
function every(body, ms, work) {
  if (!body.isConnected) return;
  let running = false;
  const tick = async () => {
    if (running) return;
    running = true;
    try {
      await work();
    } catch (error) {
      failed(error);
    } finally {
      running = false;
    }
  };
  tick();
  view.timers.push(setInterval(tick, ms));
}

function leaveView() {
  view.timers.forEach(clearInterval);
  view.aborts.forEach((controller) => controller.abort());
  view = { timers: [], aborts: [] };
}

// -- sign-in -----------------------------------------------------------------------------------

function showLogin(message) {
  leaveView();
  document.getElementById("main").replaceChildren();
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("token").focus();
}

async function start() {
  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    signIn();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("The token is forgotten.");
  });
  window.addEventListener("hashchange", route);
  signIn();
}

async function signIn() {
  let me;
  try {
    me = await api("/v1/whoami");
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401)) showLogin(error.message);
    return;
  }
  session.scopes = me.scopes;
  session.authenticated = me.authenticated;
  document.getElementById("login").hidden = true;
  document.getElementById("who").textContent = me.authenticated
    ? "token scopes: " + me.scopes.join(", ")
    : "no token needed (--insecure-no-auth)";
  document.getElementById("forget").hidden = !me.authenticated;
  route();
}

function isAdmin() {
  return session.scopes.includes("admin");
}

// -- routes ------------------------------------------------------------------------------------

const TABS = [
  ["overview", "Overview"],
  ["lineage", "Partition lineage"],
  ["consumers", "Consumers"],
  ["streams", "Streams"],
  ["tail", "Tail"],
];

function route() {
  if (!document.getElementById("login").hidden) return;
  leaveView();
  say("");
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  const main = document.getElementById("main");
  main.replaceChildren();
  const crumbs = document.getElementById("crumbs");
  if (parts[0] !== "db" || !parts[1]) {
    crumbs.replaceChildren(h("span", null, "Databases"));
    document.title = "Databases · changestream console";
    return showDatabases(main).catch(failed);
  }
  const [, database, tab = "overview", stream] = parts;
  crumbs.replaceChildren(h("a", { href: "#/" }, "Databases"), " / ", h("span", null, database));
  document.title = database + " · changestream console";
  main.append(h("h1", null, "Database ", h("span", { class: "mono" }, database)));
  main.append(h("nav", { class: "tabs", "aria-label": "Views of this database" },
    TABS.map(([name, label]) => h("a", {
      href: "#/db/" + encodeURIComponent(database) + "/" + name,
      "aria-current": name === tab ? "page" : null,
    }, label))));
  const body = h("section", { id: "view", "aria-label": tab });
  main.append(body);
  const shows = { overview: showOverview, lineage: showLineage, consumers: showConsumers, streams: showStreams, tail: showTail };
  (shows[tab] || showOverview)(body, database, stream).catch(failed);
}

function failed(error) {
  if (!(error instanceof ApiError && error.status === 401)) say(error.message, true);
}

async function showDatabases(main) {
  main.append(h("h1", null, "Databases"));
  const found = await api("/v1/databases");
  main.append(h("ul", { id: "databases" }, found.databases.map((name) =>
    h("li", null, h("a", { href: "#/db/" + encodeURIComponent(name) }, name)))));
  if (found.databases.length === 0) main.append(h("p", null, "This server serves no database."));
  const notServed = found.not_databases || [];
  if (notServed.length) {
    main.append(h("h2", null, "Files not served"));
    main.append(table(["file", "why"], notServed.map((entry) =>
      h("tr", null, h("td", { class: "mono" }, entry.name), h("td", null, entry.problem)))));
  }
}

// A change stream picker; choosing one goes to the same tab for it.
async function streamPicker(container, database, tab, chosen) {
  const found = await api(db(database) + "/change_streams");
  const names = found.change_streams.map((stream) => stream.name);
  if (names.length === 0) {
    container.append(h("p", null, "This database has no change stream yet."));
    return null;
  }
  const stream = names.includes(chosen) ? chosen : names[0];
  const select = h("select", {
    id: "stream-picker",
    onchange: (event) => {
      location.hash = "#/db/" + encodeURIComponent(database) + "/" + tab + "/" + encodeURIComponent(event.target.value);
    },
  }, names.map((name) => h("option", { value: name, selected: name === stream }, name)));
  container.append(h("div", { class: "controls" }, h("label", null, "Change stream", select)));
  return stream;
}

// -- overview ----------------------------------------------------------------------------------

async function showOverview(body, database) {
  const figures = h("div", { class: "figures", id: "activity" });
  const streamsTable = h("div");
  body.append(h("h2", null, "Activity"), figures, streamsTable);
  const tablesBox = h("div");
  const streamsBox = h("div");
  body.append(h("h2", null, "Tables"), tablesBox, h("h2", null, "Change streams"), streamsBox);

  const [tables, streams] = await Promise.all([
    api(db(database) + "/tables"),
    api(db(database) + "/change_streams"),
  ]);
  tablesBox.append(table(["table", "columns", "primary key", "indexes"], tables.tables.map((t) =>
    h("tr", null,
      h("td", { class: "mono" }, t.name),
      h("td", null, t.columns.map((c) => h("div", { class: "mono" },
        c.name + " " + typeText(c.type) + (c.not_null ? " NOT NULL" : "")))),
      h("td", { class: "mono" }, t.primary_key.join(", ")),
      h("td", { class: "mono" }, (t.indexes || []).map((i) => i.name).join(", ") || "-")))));
  streamsBox.append(table(["change stream", "tracks", "value capture", "retention", "excludes"],
    streams.change_streams.map((cs) => h("tr", null,
      h("td", { class: "mono" }, cs.name),
      h("td", { class: "mono" }, cs.for_all ? "ALL" : cs.targets.map((t) =>
        t.table + (t.columns ? "(" + t.columns.join(", ") + ")" : "")).join(", ")),
      h("td", null, cs.value_capture_type),
      h("td", { class: "num" }, (cs.retention_seconds / 3600).toFixed(1) + " h"),
      h("td", null, ["insert", "update", "delete"].filter((k) => cs["exclude_" + k]).join(", ") || "-")))));

  every(body, 2000, async () => {
    const [ready, activity] = await Promise.all([
      fetch("/readyz", { cache: "no-store", credentials: "omit" }).then((r) => r.json()),
      api(db(database) + "/overview"),
    ]);
    figures.replaceChildren(
      h("div", { class: "figure" }, "server", h("b", null, ready.status)),
      h("div", { class: "figure" }, "write rate (mods/s, last " + activity.window_seconds + " s)",
        h("b", { id: "write-rate" }, rate(activity.write_rate))),
      h("div", { class: "figure" }, "newest commit",
        h("b", null, activity.last_commit_timestamp ? ago(activity.last_commit_timestamp) : "none")));
    streamsTable.replaceChildren(table(
      ["change stream", { label: "live partitions", num: true }, { label: "open reads", num: true },
        { label: "commit → reader lag", num: true }],
      activity.streams.map((st) => h("tr", null,
        h("td", { class: "mono" }, st.name),
        h("td", { class: "num" }, st.live_partitions),
        h("td", { class: "num" }, st.open_reads),
        h("td", { class: "num" }, seconds(st.reader_lag_seconds))))));
    say("Updated " + new Date().toLocaleTimeString());
  });
}

// -- partition lineage -------------------------------------------------------------------------

const WIDTH = 1000;
const HEIGHT = 440;
const LEFT = 8;

async function showLineage(body, database, chosen) {
  const stream = await streamPicker(body, database, "lineage", chosen);
  if (!stream) return;
  const from = h("input", { type: "range", id: "window-from", min: 0, max: 1000, value: 0, "aria-label": "Window start" });
  const to = h("input", { type: "range", id: "window-to", min: 0, max: 1000, value: 1000, "aria-label": "Window end" });
  const follow = h("input", { type: "checkbox", id: "follow", checked: true });
  const windowText = h("span", { class: "muted", id: "window-text" });
  body.append(h("div", { class: "controls" },
    h("label", null, "From (share of the stream's life)", from),
    h("label", null, "To", to),
    h("label", null, h("span", null, follow, " end follows now")),
    windowText));
  const summary = h("p", { id: "lineage-summary", "aria-live": "polite" });
  const picture = s("svg", { class: "lineage", id: "lineage", viewBox: `0 0 ${WIDTH} ${HEIGHT + 20}`, role: "group", "aria-label": "Partitions over time (left to right) and key range (top to bottom)" });
  const details = h("div", { class: "details", id: "partition-details" }, "Hover over or focus a partition (Tab) to see it here.");
  const listing = h("div", { id: "partition-table" });
  body.append(summary, h("div", { class: "lineage-wrap" }, picture, details), h("h2", null, "Partitions in the window"), listing);
  let selected = null;

  const describe = (p) => {
    details.replaceChildren(h("dl", null,
      h("dt", null, "partition"), h("dd", { class: "mono" }, p.token),
      h("dt", null, "keys"), h("dd", { class: "mono" }, p.start_key + " … " + p.end_key),
      h("dt", null, "from"), h("dd", null, p.start_timestamp),
      h("dt", null, "to"), h("dd", null, p.end_timestamp || "live"),
      h("dt", null, "records"), h("dd", null, p.record_count),
      h("dt", null, "write rate"), h("dd", null, rate(p.write_rate) + " mods/s"),
      h("dt", null, "parents"), h("dd", { class: "mono" }, p.parent_tokens.map(short).join(" ") || "none"),
      h("dt", null, "children"), h("dd", { class: "mono" }, p.child_tokens.map(short).join(" ") || "none")));
  };

  let drawn = 0;
  const draw = async () => {
    // A slider moved while the last poll's answer was on its way: only the newest request's
    // answer is drawn, not an older window over it.
    const mine = ++drawn;
    const created = picture.dataset.created ? Number(picture.dataset.created) : null;
    const params = new URLSearchParams();
    if (created !== null) {
      const end = Date.now();
      const at = (input) => Math.round((created + (end - created) * Number(input.value) / 1000) * 1000);
      params.set("start", String(at(from)));
      if (!follow.checked) params.set("end", String(at(to)));
    }
    const found = await api(streamPath(database, stream) + "/lineage?" + params);
    if (mine !== drawn) return;
    picture.dataset.created = String(tsMs(found.created));
    const start = tsMs(found.start);
    const end = tsMs(found.end);
    windowText.textContent = found.start + " → " + found.end;
    summary.textContent = found.partitions.length + " partitions in the window" +
      (found.total > found.partitions.length ? " (the newest " + found.partitions.length + " of " + found.total + ": narrow the window to see the others)" : "") +
      "; " + found.partitions.filter((p) => !p.end_timestamp).length + " live.";
    const x = (ms) => LEFT + (WIDTH - 2 * LEFT) * Math.min(1, Math.max(0, (ms - start) / Math.max(1, end - start)));
    const y = (rank) => 4 + (HEIGHT - 8) * rank / Math.max(1, found.key_ranks);
    const byToken = new Map(found.partitions.map((p) => [p.token, p]));
    const hottest = Math.max(1, ...found.partitions.map((p) => p.write_rate));
    const boxes = found.partitions.map((p) => {
      const left = x(tsMs(p.start_timestamp));
      const right = p.end_timestamp ? x(tsMs(p.end_timestamp)) : x(end);
      const top = y(p.key_rank_start);
      const bottom = y(p.key_rank_end);
      const rect = s("rect", {
        class: "partition" + (p.end_timestamp ? " ended" : " live") + (p.write_rate > 0 && p.write_rate >= hottest * 0.5 ? " hot" : "") + (p.token === selected ? " selected" : ""),
        x: left.toFixed(2), y: top.toFixed(2),
        width: Math.max(2, right - left).toFixed(2), height: Math.max(2, bottom - top - 1).toFixed(2),
        tabindex: 0,
        "data-token": p.token,
        "data-parents": p.parent_tokens.join(" "),
        "data-children": p.child_tokens.join(" "),
        "aria-label": `partition ${short(p.token)}, keys ${p.start_key} to ${p.end_key}, ${p.end_timestamp ? "ended" : "live"}, ${p.record_count} records, ${rate(p.write_rate)} mods per second, ${p.parent_tokens.length} parents`,
        onmouseenter: () => describe(p),
        onfocus: () => { selected = p.token; describe(p); },
      }, s("title", null, `${short(p.token)} · ${p.start_key} … ${p.end_key}\n${p.record_count} records · ${rate(p.write_rate)} mods/s`));
      return rect;
    });
    const edges = [];
    for (const child of found.partitions) {
      for (const token of child.parent_tokens) {
        const parent = byToken.get(token);
        if (!parent) continue;
        edges.push(s("line", {
          class: "edge",
          "data-parent": parent.token, "data-child": child.token,
          x1: x(tsMs(parent.end_timestamp || found.end)).toFixed(2), y1: ((y(parent.key_rank_start) + y(parent.key_rank_end)) / 2).toFixed(2),
          x2: (x(tsMs(child.start_timestamp)) + 3).toFixed(2), y2: ((y(child.key_rank_start) + y(child.key_rank_end)) / 2).toFixed(2),
        }));
      }
    }
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.token : null;
    picture.replaceChildren(
      s("defs", null, s("marker", { id: "arrow", viewBox: "0 0 6 6", refX: 6, refY: 3, markerWidth: 6, markerHeight: 6, orient: "auto" },
        s("path", { d: "M0,0 L6,3 L0,6 z", fill: "currentColor" }))),
      s("line", { class: "axis", x1: 0, y1: HEIGHT, x2: WIDTH, y2: HEIGHT }),
      s("text", { x: LEFT, y: HEIGHT + 15 }, new Date(start).toLocaleTimeString()),
      s("text", { x: WIDTH - LEFT, y: HEIGHT + 15, "text-anchor": "end" }, new Date(end).toLocaleTimeString() + " (time →)"),
      s("g", { class: "partitions" }, boxes),
      s("g", { class: "edges" }, edges));
    if (focused) {
      const again = picture.querySelector(`rect[data-token="${CSS.escape(focused)}"]`);
      if (again) again.focus({ preventScroll: true });
    }
    const newest = [...found.partitions].sort((a, b) => tsMs(b.start_timestamp) - tsMs(a.start_timestamp)).slice(0, TABLE_ROWS);
    listing.replaceChildren(table(
      ["partition", "keys", "from", "to", "parents", "children", { label: "records", num: true }, { label: "mods/s", num: true }],
      newest.map((p) => h("tr", { "data-token": p.token },
        h("td", { class: "mono" }, short(p.token)),
        h("td", { class: "mono" }, p.start_key + " … " + p.end_key),
        h("td", null, p.start_timestamp),
        h("td", null, p.end_timestamp || "live"),
        h("td", { class: "mono" }, p.parent_tokens.map(short).join(" ") || "-"),
        h("td", { class: "mono" }, p.child_tokens.map(short).join(" ") || "-"),
        h("td", { class: "num" }, p.record_count),
        h("td", { class: "num" }, rate(p.write_rate)))),
      { id: "partitions" }));
    if (newest.length < found.partitions.length) listing.append(h("p", { class: "muted" }, "The newest " + TABLE_ROWS + " are listed; the picture has them all."));
    say("Lineage updated " + new Date().toLocaleTimeString());
  };
  for (const input of [from, to, follow]) input.addEventListener("change", () => draw().catch(failed));
  every(body, 1000, draw);
}

// -- consumers ---------------------------------------------------------------------------------

async function showConsumers(body, database, chosen) {
  const stream = await streamPicker(body, database, "consumers", chosen);
  if (!stream) return;
  const groups = h("div", { id: "consumer-groups" });
  body.append(groups);
  every(body, 1000, async () => {
    const found = await api(streamPath(database, stream) + "/consumer_status");
    if (found.consumers.length === 0) {
      groups.replaceChildren(h("p", null, "No Stream Client consumer group keeps leases on this change stream."));
      return;
    }
    groups.replaceChildren(...found.consumers.map((group) => h("section", { class: "card", "data-consumer": group.consumer },
      h("h2", null, "Consumer group ", h("span", { class: "mono" }, group.consumer)),
      h("p", null, Object.keys(group.workers).length + " workers: ",
        Object.entries(group.workers).map(([worker, count]) => worker + " holds " + count).join("; ") || "none"),
      table(["partition", "parents", "owner", "stealer", "checkpoint", { label: "lag", num: true }, "state"],
        group.leases.map((lease) => h("tr", { "data-partition": lease.partition, "data-owner": lease.owner || "", "data-lag": lease.lag_seconds === null ? "" : lease.lag_seconds },
          h("td", { class: "mono" }, short(lease.partition)),
          h("td", { class: "mono" }, lease.parents.map(short).join(" ") || "-"),
          h("td", null, lease.owner || "-"),
          h("td", null, lease.stealer || "-"),
          h("td", { class: "mono" }, lease.state === "finished" ? "end" : lease.checkpoint || "-"),
          h("td", { class: "num lag" }, seconds(lease.lag_seconds)),
          h("td", { class: "state" }, lease.state)))))));
    say("Leases updated " + new Date().toLocaleTimeString());
  });
}

// -- Datastream streams ------------------------------------------------------------------------

const VERBS = {
  start: ["Not started", "Paused"],
  pause: ["Starting", "Running", "Failed"],
  resume: ["Paused", "Failed"],
  drain: ["Running"],
};

async function showStreams(body, database) {
  const list = h("div", { id: "stream-cards" });
  const note = isAdmin() ? null : h("p", { class: "muted" }, "Actions need a token with the admin scope.");
  if (note) body.append(note);
  body.append(list);
  const seen = new Map();
  // What each stream's last action from this page did: shown on its card until the next one
  // (the status line is the polls').
  const outcomes = new Map();
  let shown = 0;
  const act = async (name, verb, button) => {
    // A stream's buttons wait for its action's answer: a second click, sent before the new
    // state is shown, would be refused.
    for (const other of button.parentElement.querySelectorAll("button")) other.disabled = true;
    shown += 1;  // and a poll already on its way draws nothing: its cards predate the action
    try {
      const moved = await api(streamPath(database, name) + "/state", { method: "PUT", body: { verb } });
      outcomes.set(name, { text: verb + ": now " + moved.state + " (" + new Date().toLocaleTimeString() + ")", error: false });
    } catch (error) {
      outcomes.set(name, { text: verb + " failed: " + error.message, error: true });
    }
    await refresh().catch(failed);
  };
  const refresh = async () => {
    const mine = ++shown;
    const found = await api(db(database) + "/streams");
    if (mine !== shown) return;
    if (found.streams.length === 0) {
      list.replaceChildren(h("p", null, "No stream is defined (changestream streams create)."));
      return;
    }
    const cards = await Promise.all(found.streams.map(async (summary) => {
      const path = streamPath(database, summary.name);
      const [described, errors] = await Promise.all([api(path), api(path + "/errors?limit=5")]);
      const now = Date.now();
      const before = seen.get(summary.name);
      seen.set(summary.name, { rows: described.rows_processed, at: now });
      const perSecond = before && now > before.at ? (described.rows_processed - before.rows) * 1000 / (now - before.at) : null;
      const definition = described.definition;
      return h("section", { class: "card", "data-stream": summary.name },
        h("h2", null, "Stream ", h("span", { class: "mono" }, summary.name)),
        h("p", null, "State: ", h("span", { class: "state", "data-state": described.state }, described.state),
          " since " + described.state_changed_at + " · change stream ", h("span", { class: "mono" }, definition.change_stream),
          " → ", h("span", { class: "mono" }, definition.destination), " (" + definition.format + ")"),
        isAdmin() ? h("div", { class: "actions" }, Object.entries(VERBS).map(([verb, states]) =>
          h("button", { type: "button", "data-verb": verb, disabled: !states.includes(described.state), onclick: (event) => act(summary.name, verb, event.currentTarget) }, verb))) : null,
        outcomes.has(summary.name) ? h("p", { class: outcomes.get(summary.name).error ? "outcome error" : "outcome" },
          "Last action here: " + outcomes.get(summary.name).text) : null,
        h("div", { class: "figures" },
          h("div", { class: "figure" }, "events/s", h("b", null, perSecond === null ? "-" : rate(perSecond))),
          h("div", { class: "figure" }, "rows processed", h("b", null, described.rows_processed.toLocaleString("en"))),
          h("div", { class: "figure" }, "lag", h("b", null, seconds(described.lag_seconds))),
          h("div", { class: "figure" }, "pipeline", h("b", null, described.pipeline_attached ? "attached" : "not attached"))),
        table(["object", "table", "backfill", { label: "rows", num: true }], described.objects.map((o) => h("tr", null,
          h("td", { class: "mono" }, o.object), h("td", { class: "mono" }, o.table || "-"),
          h("td", null, o.status), h("td", { class: "num" }, o.rows.toLocaleString("en"))))),
        h("h3", null, "Recent errors"),
        errors.errors.length === 0 ? h("p", { class: "muted" }, "none") :
          h("ul", { class: "errors" }, errors.errors.slice().reverse().map((e) => h("li", null, e.time + " ", e.object ? h("span", { class: "mono" }, e.object + ": ") : null, e.message, e.retriable ? " (retried)" : " (not retried)"))));
    }));
    if (mine !== shown) return;  // an action or a newer refresh came meanwhile
    list.replaceChildren(...cards);
    say("Streams updated " + new Date().toLocaleTimeString());
  };
  every(body, 2000, refresh);
}

// -- tail --------------------------------------------------------------------------------------

async function showTail(body, database, chosen) {
  const stream = await streamPicker(body, database, "tail", chosen);
  if (!stream) return;
  const tables = await api(db(database) + "/tables");
  const tableFilter = h("select", { id: "tail-table" }, h("option", { value: "" }, "any"),
    tables.tables.map((t) => h("option", { value: t.name }, t.name)));
  const modFilter = h("select", { id: "tail-mod" }, ["", "INSERT", "UPDATE", "DELETE"].map((m) => h("option", { value: m }, m || "any")));
  const keyFilter = h("input", { type: "text", id: "tail-key", placeholder: "part of a key" });
  const toggle = h("button", { type: "button", id: "tail-toggle" }, "Pause");
  const counter = h("span", { class: "muted", id: "tail-count", "aria-live": "polite" });
  const rows = h("tbody");
  body.append(h("div", { class: "controls" },
    h("label", null, "Table", tableFilter), h("label", null, "Mod type", modFilter),
    h("label", null, "Key contains", keyFilter), toggle, counter),
    h("table", { class: "tail", id: "tail" },
      h("thead", null, h("tr", null, ["commit timestamp", "table", "mod", "keys", "new values", "partition"].map((name) => h("th", { scope: "col" }, name)))),
      rows));
  let controller = null;
  let received = 0;

  const open = async () => {
    // A tail left while it was being set up opens no stream the next view would keep open.
    if (!body.isConnected) return;
    if (controller) controller.abort();
    controller = new AbortController();
    view.aborts.push(controller);
    const mine = controller;
    const params = new URLSearchParams();
    if (tableFilter.value) params.set("table", tableFilter.value);
    if (modFilter.value) params.set("mod_type", modFilter.value);
    if (keyFilter.value) params.set("key", keyFilter.value);
    rows.replaceChildren();
    received = 0;
    toggle.textContent = "Pause";
    counter.textContent = "connecting";
    try {
      const response = await api(streamPath(database, stream) + "/tail?" + params, { stream: true, signal: mine.signal });
      // A tail replaced (filters changed) while its request was on the way says nothing: only
      // the newest one's "following" means the server follows with these filters.
      if (mine !== controller) return;
      counter.textContent = "following; " + received + " records shown so far";
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffered = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffered += decoder.decode(value, { stream: true });
        const lines = buffered.split("\n");
        buffered = lines.pop();
        for (const text of lines) {
          if (!text) continue;
          const line = JSON.parse(text);
          if (line.type === "error") throw new Error(line.error.message);
          if (line.type !== "data_change_record") continue;
          const record = line.record;
          for (const mod of record.mods) {
            received += 1;
            rows.prepend(h("tr", { "data-table": record.table_name, "data-mod": record.mod_type },
              h("td", null, record.commit_timestamp),
              h("td", { class: "mono" }, record.table_name),
              h("td", null, record.mod_type),
              h("td", { class: "mono" }, JSON.stringify(mod.keys)),
              h("td", { class: "mono values" }, mod.new_values ? JSON.stringify(mod.new_values) : "-"),
              h("td", { class: "mono" }, short(line.partition_token))));
          }
          while (rows.children.length > TAIL_ROWS) rows.lastElementChild.remove();
          counter.textContent = "following; " + received + " records shown so far";
        }
      }
      counter.textContent = "the stream ended; " + received + " records";
    } catch (error) {
      if (error.name === "AbortError" || mine !== controller) return;
      counter.textContent = "stopped: " + error.message;
      say(error.message, true);
    }
  };
  toggle.addEventListener("click", () => {
    if (controller && !controller.signal.aborted) {
      controller.abort();
      toggle.textContent = "Follow";
      counter.textContent = "paused; " + received + " records";
    } else {
      open();
    }
  });
  for (const input of [tableFilter, modFilter]) input.addEventListener("change", open);
  keyFilter.addEventListener("change", open);
  open();
}

document.addEventListener("DOMContentLoaded", start);
