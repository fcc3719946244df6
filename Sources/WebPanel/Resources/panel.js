(function () {
  "use strict";
  var island = document.getElementById("findmy-data");
  if (!island) { return; }
  var data = JSON.parse(island.textContent);
  var status = document.getElementById("live-status");
  var skewMillis = Date.now() - Date.parse(data.now);
  var state = { map: null, markers: {}, circles: {}, track: null, trackPoints: [], updates: 0, lost: false };
  window.findmyPanel = state;

  function say(text, lost) {
    if (!status) { return; }
    status.textContent = text;
    status.className = lost ? "lost" : "";
  }

  // One formatter for the page: toLocaleString with options builds a new one per call, which cost
  // about 0.3 ms per track point, most of a 30-day history's drawing time (docs/benchmarks.md).
  var localFormat = new Intl.DateTimeFormat([], { dateStyle: "medium", timeStyle: "short" });
  function localTime(iso) {
    return localFormat.format(new Date(iso));
  }

  function duration(seconds) {
    if (seconds < 90) { return seconds + " s"; }
    if (seconds < 5400) { return Math.round(seconds / 60) + " min"; }
    if (seconds < 129600) { return Math.round(seconds / 3600) + " h"; }
    return Math.round(seconds / 86400) + " days";
  }

  function relative(iso) {
    var seconds = Math.round((Date.now() - skewMillis - Date.parse(iso)) / 1000);
    if (seconds < -60) { return "in the future: " + duration(-seconds) + " ahead"; }
    if (seconds < 60) { return "just now"; }
    return duration(seconds) + " ago";
  }

  function refreshTimes() {
    document.querySelectorAll("time.local").forEach(function (element) {
      element.textContent = localTime(element.getAttribute("datetime"));
    });
    document.querySelectorAll(".ago[data-at]").forEach(function (element) {
      element.textContent = relative(element.getAttribute("data-at"));
    });
  }

  function localRanges() {
    var midnight = new Date();
    midnight.setHours(0, 0, 0, 0);
    var day = 86400000;
    var ranges = {
      today: [midnight.getTime(), midnight.getTime() + day],
      yesterday: [midnight.getTime() - day, midnight.getTime()]
    };
    document.querySelectorAll("a[data-range]").forEach(function (link) {
      var range = ranges[link.getAttribute("data-range")];
      if (!range) { return; }
      link.href = "/find-my?selected=" + encodeURIComponent(link.getAttribute("data-device")) +
        "&from=" + new Date(range[0]).toISOString() + "&to=" + new Date(range[1]).toISOString();
    });
  }

  // null: the app sent no accuracy. Never drawn or worded as precise.
  function accuracyText(meters) {
    if (meters === null || meters === undefined || !(meters > 0)) { return "accuracy unknown"; }
    return "± " + (meters >= 1000 ? (Math.floor(meters / 100) / 10) + " km" : Math.round(meters) + " m");
  }

  function known(meters) { return meters !== null && meters !== undefined && meters > 0; }

  function place(device) {
    var fix = device.latest;
    if (!fix) { return; }
    var at = [fix.latitude, fix.longitude];
    var marker = state.markers[device.id];
    // Unknown accuracy: no circle, a faded marker titled so; a pin alone would look precise.
    var title = known(fix.accuracy_m) ? device.name : device.name + " (accuracy unknown)";
    if (marker) {
      marker.setLatLng(at);
    } else {
      marker = L.marker(at, { title: title, alt: title, keyboard: true }).addTo(state.map);
      marker.on("click", function () { window.location.href = "/find-my?selected=" + device.id; });
      state.markers[device.id] = marker;
    }
    marker.setOpacity(known(fix.accuracy_m) ? 1 : 0.55);
    if (marker.getElement && marker.getElement()) { marker.getElement().title = title; }
    var circle = state.circles[device.id];
    if (!known(fix.accuracy_m)) {
      if (circle) { state.map.removeLayer(circle); delete state.circles[device.id]; }
    } else if (circle) {
      circle.setLatLng(at).setRadius(fix.accuracy_m);
    } else {
      // Always the circle when known: a 3 km fix must look like a 3 km fix.
      state.circles[device.id] = L.circle(at, {
        radius: fix.accuracy_m, weight: 1, fillOpacity: 0.15, interactive: false
      }).addTo(state.map);
    }
  }

  function drawMap() {
    var element = document.getElementById("map");
    if (!element) { return; }
    if (!window.L) {
      element.textContent = "The map is unavailable (Leaflet is not installed on the server); the list still works.";
      return;
    }
    state.map = L.map(element, { zoomControl: true, keyboard: true });
    var attribution = document.createElement("span");
    attribution.textContent = data.tile_attribution;
    L.tileLayer(data.tile_url, { attribution: attribution.innerHTML, maxZoom: 19 }).addTo(state.map);
    data.devices.forEach(place);
    var bounds = null;
    if (data.track && data.track.length) {
      var line = data.track.map(function (fix) { return [fix.latitude, fix.longitude]; });
      state.track = L.polyline(line, { weight: 3 }).addTo(state.map);
      // Thousands of points as SVG elements are what makes a month slow to draw; one canvas
      // holds them all. Tooltips and focus from the timeline work the same.
      var pointRenderer = L.canvas({ padding: 0.5 });
      data.track.forEach(function (fix) {
        var point = L.circleMarker([fix.latitude, fix.longitude], { radius: 4, weight: 1, renderer: pointRenderer })
          .bindTooltip(localTime(fix.recorded_at) + " · " + accuracyText(fix.accuracy_m))
          .addTo(state.map);
        state.trackPoints.push(point);
      });
      bounds = state.track.getBounds();
      document.querySelectorAll("#timeline li[data-index]").forEach(function (item) {
        var point = state.trackPoints[Number(item.getAttribute("data-index"))];
        if (!point) { return; }
        var show = function () { point.openTooltip(); };
        var hide = function () { point.closeTooltip(); };
        item.addEventListener("focus", show);
        item.addEventListener("mouseenter", show);
        item.addEventListener("blur", hide);
        item.addEventListener("mouseleave", hide);
      });
    } else {
      // A circle's own getBounds needs a map view, which is what is being decided here.
      data.devices.forEach(function (device) {
        if (!device.latest || (data.selected !== null && device.id !== data.selected)) { return; }
        var circle = L.latLng(device.latest.latitude, device.latest.longitude).toBounds(2 * (known(device.latest.accuracy_m) ? device.latest.accuracy_m : 100));
        bounds = bounds ? bounds.extend(circle) : circle;
      });
    }
    if (bounds) {
      state.map.fitBounds(bounds, { maxZoom: 17, padding: [20, 20] });
    } else {
      state.map.setView([20, 0], 2);
    }
    // For ops/bench/panel_browser.py: the moment the map's layers (the track included) are
    // in the DOM, on the page's performance.now() clock; the next paint shows them.
    document.documentElement.dataset.mapDrawnAt = String(performance.now());
  }

  function update(devices) {
    devices.forEach(function (device) {
      if (!device.latest) { return; }
      if (state.map) { place(device); }
      var row = document.querySelector('#device-list li[data-device-id="' + device.id + '"] .ago');
      if (row) { row.setAttribute("data-at", device.latest.recorded_at); }
      if (device.id === data.selected) {
        var taken = document.getElementById("fix-taken");
        if (taken) {
          taken.querySelector("time").setAttribute("datetime", device.latest.recorded_at);
          var ago = taken.querySelector(".ago");
          if (ago) { ago.setAttribute("data-at", device.latest.recorded_at); }
        }
        var accuracy = document.getElementById("accuracy");
        if (accuracy) { accuracy.textContent = accuracyText(device.latest.accuracy_m); }
        if (state.map && !state.track) { state.map.panTo([device.latest.latitude, device.latest.longitude]); }
      }
    });
    refreshTimes();
  }

  function poll() {
    fetch("/api/find-my/devices", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) {
          say("Your session has ended. Reload the page to log in again.", true);
          return null;
        }
        if (!response.ok) { throw new Error("status " + response.status); }
        return response.json();
      })
      .then(function (body) {
        if (!body) { return; }
        update(body.devices);
        state.updates += 1;
        state.lost = false;
        say("Live: updated " + new Date().toLocaleTimeString(), false);
        schedule();
      })
      .catch(function () {
        if (!state.lost) { state.lostSince = new Date(); }
        state.lost = true;
        say("Connection to the server lost since " + state.lostSince.toLocaleTimeString() +
          "; retrying. Positions shown may be out of date.", true);
        schedule();
      });
  }

  function schedule() { window.setTimeout(poll, Math.max(1, data.poll_seconds) * 1000); }


  // Commands (docs/commands.md): the buttons POST to the command API with the session's CSRF
  // token, then the progress is read back every two seconds and said in plain words.
  var clockFormat = new Intl.DateTimeFormat([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  function clock(iso) { return clockFormat.format(new Date(iso)); }
  var channelNames = {
    apns: "Apple", fcm: "Google", unifiedpush: "UnifiedPush", "owntracks-mqtt": "OwnTracks (MQTT)",
    "report-answer": "the app, with its report answer", "owntracks-http": "OwnTracks, with its answer"
  };
  var doneWords = { locate: "located", sound: "rang", lost: "marked lost", found: "marked found" };
  var finalStates = { answered: true, expired: true };

  function lastKnown() {
    var device = data.devices.filter(function (d) { return d.id === data.selected; })[0];
    if (!device || !device.latest) { return "there is no known position yet"; }
    return "the last known position is from " + clock(device.latest.recorded_at);
  }

  function progressText(command) {
    var parts = ["asked " + clock(command.requested_at)];
    command.deliveries.forEach(function (delivery) {
      var name = channelNames[delivery.channel] || delivery.channel;
      if (delivery.state === "sent") {
        parts.push("sent to " + name + " " + clock(delivery.at));
      } else {
        parts.push(name + " failed " + clock(delivery.at) + " (" + delivery.detail + ")" +
          (delivery.retry_at ? ", retrying " + clock(delivery.retry_at) : ""));
      }
    });
    if (command.state === "answered") {
      parts.push("answered " + clock(command.answer.answered_at) +
        (command.answer.fix ? " with a new position" : " (that position was removed since)"));
      return parts.join(" · ");
    }
    var waited = (Date.now() - skewMillis - Date.parse(command.requested_at)) / 1000;
    if (command.state === "expired" && command.end_reason === "found") {
      parts.push("ended: found");
      return parts.join(" · ");
    }
    if (command.state === "expired" || (command.kind === "locate" && waited > 30)) {
      return parts.join(" · ") + (command.state === "expired" ? " · no answer" : " · no answer yet") +
        " — the phone may be off, offline or out of battery; " + lastKnown();
    }
    return parts.join(" · ");
  }

  function logLine(command) {
    var line = (doneWords[command.kind] || command.kind) + " by " + command.requested_by + " at " +
      clock(command.requested_at);
    if (command.state === "answered") { line += " — answered " + clock(command.answer.answered_at); }
    else if (command.state === "expired") { line += command.end_reason === "found" ? " — ended: found" : " — no answer"; }
    else { line += " — " + command.state; }
    return line;
  }

  function commandsPath(section) { return "/api/find-my/devices/" + section.getAttribute("data-device") + "/commands"; }

  function loadLog(section) {
    fetch(commandsPath(section) + "?limit=20", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        var list = document.getElementById("command-log");
        if (!list || !body) { return; }
        list.textContent = "";
        if (body.commands.length === 0) {
          var none = document.createElement("li");
          none.textContent = "Nothing yet.";
          list.appendChild(none);
        }
        body.commands.forEach(function (command) {
          var item = document.createElement("li");
          item.textContent = logLine(command);
          list.appendChild(item);
        });
      })
      .catch(function () {});
  }

  function follow(section, id, after, deadline) {
    var progress = document.getElementById("command-progress");
    fetch(commandsPath(section) + "/" + id + "?after_offset=" + after, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (command) {
        if (command) {
          progress.textContent = progressText(command);
          progress.setAttribute("data-state", command.state);
          if (finalStates[command.state]) { loadLog(section); return; }
        }
        if (Date.now() < deadline) { window.setTimeout(function () { follow(section, id, after, deadline); }, 2000); }
      })
      .catch(function () {
        if (Date.now() < deadline) { window.setTimeout(function () { follow(section, id, after, deadline); }, 2000); }
      });
  }

  function send(section, body) {
    var progress = document.getElementById("command-progress");
    progress.textContent = "asking…";
    fetch(commandsPath(section), {
      method: "POST", credentials: "same-origin", cache: "no-store",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": data.csrf || "" },
      body: JSON.stringify(body)
    })
      .then(function (response) {
        return response.json().then(function (json) { return { status: response.status, body: json, response: response }; });
      })
      .then(function (answer) {
        if (answer.status === 202) {
          progress.textContent = "asked " + clock(answer.body.requested_at);
          loadLog(section);
          follow(section, answer.body.command_id, answer.body.offset, Date.now() + 11 * 60000);
        } else if (answer.status === 429) {
          progress.textContent = "Asked too recently: try again in " +
            (answer.response.headers.get("Retry-After") || "a few") + " s.";
        } else {
          progress.textContent = (answer.body.error && answer.body.error.message) || ("failed: " + answer.status);
        }
      })
      .catch(function () { progress.textContent = "The server did not answer; try again."; });
  }

  function commands() {
    var section = document.getElementById("commands");
    if (!section) { return; }
    section.querySelectorAll("button[data-kind]").forEach(function (button) {
      if (button.type === "submit") { return; }
      button.addEventListener("click", function () { send(section, { kind: button.getAttribute("data-kind") }); });
    });
    var lost = document.getElementById("lost-form");
    if (lost) {
      lost.addEventListener("submit", function (event) {
        event.preventDefault();
        var body = { kind: "lost" };
        var message = lost.elements.message.value.trim();
        var phone = lost.elements.phone.value.trim();
        if (message) { body.message = message; }
        if (phone) { body.phone = phone; }
        send(section, body);
      });
    }
    loadLog(section);
  }

  refreshTimes();
  localRanges();
  drawMap();
  commands();
  say("Live: waiting for the first update", false);
  schedule();
})();