// gpuvisor dashboard: polls the scheduler's api/state (read-only JSON) and
// draws it with plain DOM calls.  No framework, nothing fetched from
// elsewhere; every text is set through textContent (names come from pods).
"use strict";
(function () {
  var POLL_MS = 5000;
  var PALETTE = ["#2f6fdf", "#1f9d55", "#d9822b", "#8e44ad", "#16a2b8", "#c0392b",
                 "#7f8c2d", "#e056a0", "#5d6d7e", "#b8860b", "#2e8b57", "#6a5acd"];

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function colorOf(key) {
    var h = 0;
    for (var i = 0; i < key.length; i++) h = (h * 31 + key.charCodeAt(i)) >>> 0;
    return PALETTE[h % PALETTE.length];
  }
  function gib(mib) { return (mib / 1024).toFixed(mib >= 10240 ? 0 : 1) + " GiB"; }
  function pct(x) { return (100 * x).toFixed(1) + "%"; }
  function dur(s) {
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60 ? " " + (s % 60) + "s" : "");
    return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  }

  function card(k, v, s) {
    var c = el("div", "card");
    c.appendChild(el("div", "k", k));
    c.appendChild(el("div", "v", v));
    if (s) c.appendChild(el("div", "s", s));
    return c;
  }

  function drawOverview(st) {
    var t = st.totals, box = document.getElementById("overview");
    box.textContent = "";
    var ready = st.nodes.filter(function (n) { return n.state === "ready"; }).length;
    box.appendChild(card("Nodes", t.nodes, ready + " with a live agent"));
    box.appendChild(card("GPUs", t.gpus, ""));
    box.appendChild(card("Memory allocated", t.memMiB ? pct(t.usedMemMiB / t.memMiB) : "–",
                         gib(t.usedMemMiB) + " of " + gib(t.memMiB)));
    box.appendChild(card("Compute allocated", t.cores ? pct(t.usedCores / t.cores) : "–",
                         (t.usedCores / 100).toFixed(1) + " of " + (t.cores / 100) + " GPUs"));
    box.appendChild(card("GPU pods", t.pods, ""));
    box.appendChild(card("Pending", t.pending, t.pending ? "see below" : "none"));
    box.appendChild(card("Fragmentation", pct(st.fragmentation.ratio),
                         st.fragmentation.fragGPUs.toFixed(2) + " of " +
                         st.fragmentation.freeGPUs.toFixed(2) + " free GPUs unusable"));
  }

  function drawHistory(st) {
    var box = document.getElementById("history"), h = st.history;
    box.textContent = "";
    var NS = "http://www.w3.org/2000/svg", W = 1000, H = 180, P = 28;
    var svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("preserveAspectRatio", "none");
    var t0 = h.length ? h[0][0] : 0, t1 = h.length ? h[h.length - 1][0] : 1;
    if (t1 <= t0) t1 = t0 + 1;
    function x(t) { return P + (W - 2 * P) * (t - t0) / (t1 - t0); }
    function y(v) { return H - P + (2 * P - H) * Math.min(1, Math.max(0, v)); }
    [0, 0.5, 1].forEach(function (g) {
      var l = document.createElementNS(NS, "line");
      l.setAttribute("x1", P); l.setAttribute("x2", W - P);
      l.setAttribute("y1", y(g)); l.setAttribute("y2", y(g));
      l.setAttribute("stroke", "#dde3ea");
      svg.appendChild(l);
      var tx = document.createElementNS(NS, "text");
      tx.setAttribute("x", 2); tx.setAttribute("y", y(g) + 4);
      tx.setAttribute("font-size", "11"); tx.setAttribute("fill", "#667385");
      tx.textContent = (g * 100) + "%";
      svg.appendChild(tx);
    });
    var series = [[1, "#d64545", "fragmentation"], [2, "#2f6fdf", "memory allocated"],
                  [3, "#1f9d55", "compute allocated"]];
    series.forEach(function (s) {
      var pts = h.map(function (r) { return x(r[0]).toFixed(1) + "," + y(r[s[0]]).toFixed(1); });
      if (pts.length === 1) pts.push((W - P) + "," + y(h[0][s[0]]).toFixed(1));
      var pl = document.createElementNS(NS, "polyline");
      pl.setAttribute("points", pts.join(" "));
      pl.setAttribute("fill", "none"); pl.setAttribute("stroke", s[1]);
      pl.setAttribute("stroke-width", "2"); pl.setAttribute("vector-effect", "non-scaling-stroke");
      svg.appendChild(pl);
    });
    box.appendChild(svg);
    var lg = el("div", "legend");
    series.forEach(function (s) {
      var item = el("span", "", null), sw = el("i");
      sw.style.background = s[1];
      item.appendChild(sw); item.appendChild(document.createTextNode(s[2]));
      lg.appendChild(item);
    });
    lg.appendChild(el("span", "", h.length + " samples, one per " + st.historyIntervalSeconds + " s, since " +
                      new Date(t0 * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC"));
    box.appendChild(lg);
  }

  function drawPending(st) {
    var body = document.querySelector("#pending tbody");
    body.textContent = "";
    document.getElementById("pending-count").textContent = st.pending.length || "";
    if (!st.pending.length) {
      var tr = el("tr"), td = el("td", "empty", "No GPU pod is waiting.");
      td.colSpan = 5; tr.appendChild(td); body.appendChild(tr);
      return;
    }
    st.pending.forEach(function (p) {
      var tr = el("tr");
      tr.appendChild(el("td", "", p.namespace));
      tr.appendChild(el("td", "", p.pod));
      tr.appendChild(el("td", "", p.reason.replace(/_/g, " ")));
      tr.appendChild(el("td", "", p.message || ""));
      tr.appendChild(el("td", "", dur(p.seconds)));
      body.appendChild(tr);
    });
  }

  function drawGpu(g) {
    var box = el("div", "gpu" + (g.healthy ? "" : " unhealthy"));
    var head = el("div", "gpu-head");
    var left = el("span");
    left.appendChild(el("b", "", "GPU " + g.index));
    left.appendChild(document.createTextNode(" " + (g.model || "") + (g.healthy ? "" : " (unhealthy)")));
    head.appendChild(left);
    head.appendChild(el("span", "", (g.utilPercent !== undefined ? "util " + Math.round(g.utilPercent) + "% · " : "") +
                                    g.tasks + "/" + g.split + " tasks"));
    head.title = g.uuid;
    box.appendChild(head);
    var bar = el("div", "bar");
    g.slices.forEach(function (s) {
      var seg = el("div", "seg" + (s.phase === "reserved" ? " reserved" : ""));
      seg.style.width = (g.memMiB ? 100 * s.memMiB / g.memMiB : 0) + "%";
      var c = colorOf(s.namespace + "/" + s.pod);
      if (s.usedMemMiB !== undefined && s.memMiB > 0) {
        // live usage: the used part of the slice solid, the rest pale
        var u = Math.min(100, 100 * s.usedMemMiB / s.memMiB).toFixed(1);
        seg.style.background = "linear-gradient(to right, " + c + " " + u + "%, " + c + "55 " + u + "%)";
      } else {
        seg.style.background = c;
      }
      seg.title = s.namespace + "/" + s.pod + " [" + s.container + "]: " + gib(s.memMiB) +
                  ", " + (s.cores ? s.cores + "% compute" : "unlimited compute") +
                  (s.usedMemMiB !== undefined ? "; using " + gib(s.usedMemMiB) : "") +
                  (s.achievedShare !== undefined ? ", " + Math.round(100 * s.achievedShare) + "% busy" : "") +
                  (s.phase === "reserved" ? " (reserved)" : "");
      bar.appendChild(seg);
    });
    box.appendChild(bar);
    var ml = el("div", "barlabel");
    ml.appendChild(el("span", "", "memory " + gib(g.usedMemMiB) + " / " + gib(g.memMiB)));
    ml.appendChild(el("span", "", g.memMiB ? pct(g.usedMemMiB / g.memMiB) : ""));
    box.appendChild(ml);
    var cb = el("div", "bar cores");
    g.slices.forEach(function (s) {
      var seg = el("div", "seg");
      seg.style.width = s.cores + "%";
      seg.style.background = colorOf(s.namespace + "/" + s.pod);
      cb.appendChild(seg);
    });
    box.appendChild(cb);
    var cl = el("div", "barlabel");
    cl.appendChild(el("span", "", "compute " + g.usedCores + "% allocated"));
    box.appendChild(cl);
    if (!g.slices.length) {
      box.appendChild(el("div", "free", "free"));
    } else {
      var ul = el("ul", "slices");
      g.slices.forEach(function (s) {
        var li = el("li"), sw = el("span", "swatch");
        sw.style.background = colorOf(s.namespace + "/" + s.pod);
        li.appendChild(sw);
        li.appendChild(el("span", "who", s.namespace + "/" + s.pod + " · " + s.container +
                          (s.phase === "reserved" ? " (reserved)" : "")));
        var amt = (s.usedMemMiB !== undefined ? gib(s.usedMemMiB) + " of " : "") + gib(s.memMiB) + " · " +
                  (s.achievedShare !== undefined ? Math.round(100 * s.achievedShare) + "% of " : "") +
                  (s.cores ? s.cores + "%" : "any");
        li.appendChild(el("span", "amt", amt));
        ul.appendChild(li);
      });
      box.appendChild(ul);
    }
    return box;
  }

  function drawNodes(st) {
    var box = document.getElementById("nodes");
    box.textContent = "";
    if (!st.nodes.length) box.appendChild(el("p", "free", "No node known yet."));
    st.nodes.slice().sort(function (a, b) { return a.name < b.name ? -1 : a.name > b.name ? 1 : 0; })
      .forEach(function (n) {
      var nd = el("div", "node");
      nd.id = "node-" + n.name;
      var head = el("div", "node-head");
      head.appendChild(el("span", "name", n.name));
      head.appendChild(el("span", "state " + n.state, n.state.replace(/_/g, " ")));
      var mem = 0, used = 0;
      n.gpus.forEach(function (g) { mem += g.memMiB; used += g.usedMemMiB; });
      head.appendChild(el("span", "meta", n.gpus.length + " GPU" + (n.gpus.length === 1 ? "" : "s") +
                          (mem ? " · " + gib(used) + " / " + gib(mem) + " allocated" : "") +
                          " · fragmentation " + (n.fragMilli / 1000).toFixed(2) + " GPU"));
      if (n.reason) head.appendChild(el("span", "meta", n.reason));
      nd.appendChild(head);
      var grid = el("div", "gpus");
      n.gpus.forEach(function (g) { grid.appendChild(drawGpu(g)); });
      nd.appendChild(grid);
      box.appendChild(nd);
    });
  }

  function draw(st) {
    drawOverview(st);
    drawHistory(st);
    drawPending(st);
    drawNodes(st);
    var s = document.getElementById("status");
    s.className = "status";
    var u = st.usage || {};
    s.textContent = "gpuvisor " + st.version + " · updated " +
                    new Date(st.time * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" +
                    (st.ready ? "" : " · caches syncing") +
                    (u.time ? " · live usage from " + u.agents + " agent" + (u.agents === 1 ? "" : "s") +
                              (u.agentsFailed ? " (" + u.agentsFailed + " not answering)" : "")
                            : " · no live usage yet");
    document.body.setAttribute("data-loaded", "1");
  }

  function poll() {
    fetch("api/state", { cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(draw)
      .catch(function (e) {
        var s = document.getElementById("status");
        s.className = "status err";
        s.textContent = "cannot read api/state: " + e.message;
      })
      .then(function () { setTimeout(poll, POLL_MS); });
  }
  poll();
})();
