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

  document.addEventListener('DOMContentLoaded', function () {
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
