// The settings page's "Import history" form (HistoryFilesPanel.swift, docs/import-export.md): the
// chosen file is the body of POST /api/find-my/devices/{id}/imports (with dry_run=1 for "Check
// first"), sent with the session's CSRF token as the panel's other API changes are; then the import's
// status is followed (long polls of half a second) until it is done or failed, and its summary shown.
(function () {
  "use strict";
  var form = document.getElementById("import-form");
  if (!form) { return; }
  var device = form.getAttribute("data-device");
  var csrf = form.getAttribute("data-csrf") || "";
  var windowDays = parseInt(form.getAttribute("data-retention-days"), 10);
  var input = document.getElementById("import-file");
  var check = document.getElementById("import-check");
  var start = document.getElementById("import-start");
  var progress = document.getElementById("import-progress");
  var summary = document.getElementById("import-summary");
  var waitMillis = 500;
  var dayMillis = 86400000;

  function say(text) { progress.textContent = text; }

  function busy(on) {
    check.disabled = on;
    start.disabled = on;
    input.disabled = on;
  }

  function size(bytes) {
    if (bytes < 1024) { return bytes + " bytes"; }
    if (bytes < 1048576) { return (bytes / 1024).toFixed(1) + " KB"; }
    if (bytes < 1073741824) { return (bytes / 1048576).toFixed(1) + " MB"; }
    return (bytes / 1073741824).toFixed(2) + " GB";
  }

  function localTime(iso) {
    return new Date(iso).toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
  }

  function apiError(status, body) {
    return (body && body.error && body.error.message) || ("The server answered " + status + ".");
  }

  function parse(text) {
    try { return JSON.parse(text); } catch (error) { return null; }
  }

  function failed(text) {
    busy(false);
    say("");
    summary.className = "failed";
    summary.textContent = text;
  }

  function send(dryRun) {
    var file = input.files[0];
    if (!file) {
      say("Choose a file first.");
      input.focus();
      return;
    }
    busy(true);
    summary.className = "";
    summary.textContent = "";
    var url = "/api/find-my/devices/" + encodeURIComponent(device) + "/imports?name=" +
      encodeURIComponent(file.name) + (dryRun ? "&dry_run=1" : "");
    // XMLHttpRequest rather than fetch: it reports the upload's progress.
    var request = new XMLHttpRequest();
    request.open("POST", url);
    request.setRequestHeader("X-CSRF-Token", csrf);
    request.setRequestHeader("Content-Type", "application/octet-stream");
    request.upload.onprogress = function (event) {
      if (event.lengthComputable) { say("Uploading: " + size(event.loaded) + " of " + size(event.total)); }
    };
    request.onload = function () {
      var body = parse(request.responseText);
      if (request.status !== 202 || !body || !body.import_id) {
        failed(apiError(request.status, body));
        return;
      }
      say(dryRun ? "Checking…" : "Importing…");
      follow(body.import_id, dryRun);
    };
    request.onerror = function () { failed("The upload did not reach the server; nothing was imported. Try again."); };
    request.send(file);
  }

  function follow(id, dryRun) {
    // The server holds the answer until the import ends or waitMillis pass: the progress moves
    // about twice a second, and the summary comes the moment the import ends.
    var url = "/api/find-my/devices/" + encodeURIComponent(device) + "/imports/" + encodeURIComponent(id) +
      "?wait_ms=" + waitMillis;
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        return response.json().then(function (json) { return { status: response.status, body: json }; });
      })
      .then(function (answer) {
        if (answer.status !== 200) {
          failed(apiError(answer.status, answer.body));
          return;
        }
        var status = answer.body;
        if (status.state === "done" || status.state === "failed") {
          show(status, dryRun);
          return;
        }
        // Two passes over the file, each counting its bytes from 0: its SHA-256 (from which the
        // chunks' batch ids derive), then its fixes.
        var text;
        if (status.state === "reading") {
          text = "Reading the file (1 of 2): " + size(status.bytes_read) + " of " + size(status.file_bytes);
        } else {
          text = (dryRun ? "Reading the fixes (2 of 2): " : "Storing (2 of 2): ") + size(status.bytes_read) +
            " of " + size(status.file_bytes) + ", " + status.fixes_read + " fixes read";
          if (!dryRun) { text += ", " + status.accepted + " stored"; }
        }
        say(text);
        follow(id, dryRun);
      })
      .catch(function () {
        failed("Lost the connection to the server. The import goes on there; reload this page later to see your history.");
      });
  }

  function row(list, label, value) {
    var term = document.createElement("dt");
    term.textContent = label;
    var detail = document.createElement("dd");
    detail.textContent = value;
    list.appendChild(term);
    list.appendChild(detail);
  }

  // A count, or counts by kind (what is not a fix is counted by kind).
  function total(value) {
    if (typeof value === "number") { return value; }
    if (!value || typeof value !== "object") { return 0; }
    return Object.keys(value).reduce(function (sum, key) { return sum + total(value[key]); }, 0);
  }

  // " (expired: 3, out_of_range: 1)", or nothing.
  function byKind(counts) {
    if (!counts || typeof counts !== "object") { return ""; }
    var parts = Object.keys(counts).map(function (key) { return key + ": " + counts[key]; });
    return parts.length ? " (" + parts.join(", ") + ")" : "";
  }

  // The window that would keep the oldest fix: its age in whole days, and one more for the time the
  // import takes.
  function daysNeeded(status) {
    if (!status.recorded_min) { return null; }
    return Math.ceil((Date.now() - Date.parse(status.recorded_min)) / dayMillis) + 1;
  }

  function show(status, dryRun) {
    busy(false);
    say("");
    summary.className = status.state;
    summary.textContent = "";
    var heading = document.createElement("p");
    heading.id = "import-state";
    heading.textContent = status.state === "failed" ? "Failed: " + (status.error || "the import stopped.")
      : (dryRun ? "Checked (done): nothing was stored." : "Import done.");
    summary.appendChild(heading);
    var list = document.createElement("dl");
    row(list, "File", status.file_name + " (" + (status.format || "format unknown") + ", " + size(status.file_bytes) + ")");
    row(list, "Fixes read", String(status.fixes_read));
    if (!dryRun) {
      row(list, "Stored", String(status.accepted));
      row(list, "Already stored (duplicates)", String(status.duplicate));
      row(list, "Rejected", String(status.rejected) + byKind(status.rejected_by_reason));
    }
    row(list, "Outside the retention window", String(status.outside_retention));
    var notAFix = total(status.not_a_fix);
    if (notAFix > 0) {
      row(list, "Not a fix (counted, not stored)", String(notAFix) + byKind(status.not_a_fix_by_kind));
    }
    if (status.recorded_min && status.recorded_max) {
      row(list, "Time range", localTime(status.recorded_min) + " to " + localTime(status.recorded_max));
    }
    summary.appendChild(list);
    var needed = daysNeeded(status);
    if (status.outside_retention > 0) {
      var outside = document.createElement("p");
      outside.className = "outside";
      outside.id = "import-outside";
      outside.textContent = status.outside_retention + " of the fixes are older than this device's retention window (" +
        (status.retention_days || windowDays) + " days) and " + (dryRun ? "would not be" : "were not") + " stored." +
        (needed ? " To keep them, set “Days to keep” under Retention above to at least " + needed +
          " and save, then " + (dryRun ? "import." : "import the file again: what is stored already is not stored twice.") : "");
      summary.appendChild(outside);
    }
  }

  check.addEventListener("click", function () { send(true); });
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    send(false);
  });
}());
