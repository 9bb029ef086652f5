// eosink web UI: small progressive enhancements. Every page works without
// this file; the Content-Security-Policy allows no inline script.
(function () {
  'use strict';

  // Relative times: "3 min ago", with the exact time as the tooltip.
  function ago(then) {
    var s = Math.round((Date.now() - then.getTime()) / 1000);
    if (s < 0) s = 0;
    if (s < 5) return 'just now';
    if (s < 60) return s + ' s ago';
    var m = Math.round(s / 60);
    if (m < 60) return m + ' min ago';
    var h = Math.round(m / 60);
    if (h < 48) return h + ' h ago';
    return Math.round(h / 24) + ' days ago';
  }
  function updateTimes() {
    var times = document.querySelectorAll('time[data-rel]');
    for (var i = 0; i < times.length; i++) {
      var t = times[i];
      var d = new Date(t.getAttribute('datetime'));
      if (isNaN(d.getTime())) continue;
      if (!t.dataset.abs) {
        t.dataset.abs = t.textContent;
        t.title = t.textContent;
      }
      t.textContent = ago(d);
    }
  }

  // Filter the rows of the current page as one types. A folder's filter
  // box is also a form: Enter asks the server to filter every page.
  function setupFilter(input) {
    var table = document.getElementById(input.dataset.filter);
    if (!table) return;
    var rows = table.querySelectorAll('[data-name]');
    var none = table.parentNode.parentNode.querySelector('.filter-empty');
    function apply() {
      var q = input.value.trim().toLowerCase();
      var shown = 0;
      for (var i = 0; i < rows.length; i++) {
        var hit = !q || rows[i].dataset.name.toLowerCase().indexOf(q) >= 0;
        rows[i].hidden = !hit;
        if (hit) shown++;
      }
      if (none) none.hidden = !(rows.length > 0 && shown === 0);
    }
    input.addEventListener('input', apply);
    input.addEventListener('keydown', function (e) {
      if (e.key === 'Escape') { input.value = ''; apply(); }
    });
  }

  // A form that takes a while shows that it is working, and cannot be
  // sent twice.
  function setupBusy(form) {
    form.addEventListener('submit', function () {
      var b = form.querySelector('button[type="submit"]');
      if (!b) return;
      window.setTimeout(function () {
        b.disabled = true;
        b.textContent = form.dataset.busy;
      }, 0);
    });
  }

  // Live commits: long-poll the commit feed from the page's cursor and
  // put each new commit on top of the table; keep the newest liveRows.
  var liveRows = 20;
  function setupLive(table) {
    var after = table.dataset.after;
    var body = table.tBodies[0];
    function cell(tr, text, cls) {
      var td = document.createElement('td');
      if (cls) td.className = cls;
      if (text instanceof Node) td.appendChild(text); else td.textContent = text;
      tr.appendChild(td);
    }
    function add(c) {
      var empty = body.querySelector('.live-empty');
      if (empty) empty.remove();
      var tr = document.createElement('tr');
      tr.className = 'live-new';
      tr.dataset.node = c.node;
      tr.dataset.checkpoint = String(c.checkpoint);
      var records = 0;
      for (var i = 0; i < c.files.length; i++) records += c.files[i].records;
      var a = document.createElement('a');
      a.className = 'mono';
      a.href = '/ui/checkpoints/' + c.checkpoint + (c.node === table.dataset.node ? '' : '?node=' + encodeURIComponent(c.node));
      a.textContent = '#' + c.checkpoint;
      cell(tr, c.node, 'mono');
      cell(tr, a);
      cell(tr, String(c.file_count === undefined ? '?' : c.file_count), 'num');
      cell(tr, records.toLocaleString() + (c.files_truncated ? '+' : ''), 'num');
      var t = document.createElement('time');
      if (c.committed_at) {
        t.setAttribute('datetime', c.committed_at);
        t.setAttribute('data-rel', '');
        t.textContent = new Date(c.committed_at).toISOString().replace('T', ' ').slice(0, 19);
      }
      cell(tr, t);
      body.insertBefore(tr, body.firstChild);
      while (body.rows.length > liveRows) body.deleteRow(body.rows.length - 1);
    }
    function poll() {
      var url = table.dataset.feed + '?wait=25&limit=100&after=' + encodeURIComponent(after);
      fetch(url, { credentials: 'same-origin', headers: { Accept: 'application/json' } }).then(function (r) {
        if (!r.ok) throw new Error('commit feed: ' + r.status);
        return r.json();
      }).then(function (page) {
        for (var i = 0; i < page.commits.length; i++) add(page.commits[i]);
        after = page.next;
        table.dataset.after = after;
        if (page.commits.length) updateTimes();
        window.setTimeout(poll, page.more ? 0 : 250);
      }).catch(function () {
        window.setTimeout(poll, 5000); // a restart, a lost network: try again
      });
    }
    poll();
  }

  document.addEventListener('DOMContentLoaded', function () {
    var live = document.getElementById('live-commits');
    if (live) setupLive(live);
    updateTimes();
    window.setInterval(updateTimes, 15000);

    var inputs = document.querySelectorAll('input[data-filter]');
    for (var i = 0; i < inputs.length; i++) setupFilter(inputs[i]);
    var forms = document.querySelectorAll('form[data-busy]');
    for (var j = 0; j < forms.length; j++) setupBusy(forms[j]);

    // "/" focuses the filter box, as in many file browsers.
    document.addEventListener('keydown', function (e) {
      var tag = document.activeElement ? document.activeElement.tagName : '';
      if (e.key !== '/' || tag === 'INPUT' || tag === 'TEXTAREA') return;
      var f = document.getElementById('filter');
      if (f) { e.preventDefault(); f.focus(); f.select(); }
    });

    // Pages that show a passing state (recovery, a stuck commit) reload.
    var refresh = parseInt(document.body.dataset.refresh || '0', 10);
    if (refresh > 0) {
      window.setTimeout(function () {
        if (!document.hidden) window.location.reload();
      }, refresh * 1000);
    }
  });
})();
