import Events
import HTTP
import Identity
import Ingest
import JSON

/// /find-my/devices/{id}/settings, for a device you own: its shares, retention, its ntfy topic
/// (NtfyPanel.swift), the import of a history file (HistoryFilesPanel.swift), the erasure of its
/// history (with a confirmation step), the pause switch shown; and the form posts that change them.
extension PanelService {
    static let settingsFlashes: [String: String] = [
        "shared": "The device is shared.",
        "revoked": "The share is revoked: that user no longer sees this device.",
        "retention": "The retention window is saved.",
        "erased":
            "The history is erased. The fixes left the database now and leave the log files at the next compaction.",
    ]
    static let settingsErrors: [String: String] = [
        "user_not_found": "There is no user with that name.",
        "self": "You see your own devices already; share with another user.",
        "invalid_until": "“Until” must be a time in the future (or empty: until you revoke it).",
        "share_not_found": "This device is not shared with that user.",
        "invalid_days": "Days must be a whole number from 1 to 36500, or empty for the default.",
        "invalid_range": "Choose a range: a start day before or equal to the end day.",
        "failed": "The change could not be stored. Nothing changed; try again.",
    ]

    func settingsPage(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        let device = form.device
        var html = HTML()
        pageTop(&html, title: "Settings of \(device.name)", caller: caller, script: "/static/import.js")
        html.raw("<h2>Settings of ")
        html.name(device.name)
        html.raw("</h2>\n<p><a href=\"/find-my?selected=")
        html.attribute(String(device.id))
        html.raw("\">Back to the device</a></p>\n")
        flash(
            &html, request,
            done: Self.settingsFlashes.merging(Self.presenceFlashes) { a, _ in a }.merging(Self.ntfyFlashes) {
                a, _ in a
            },
            errors: Self.settingsErrors.merging(Self.presenceErrors) { a, _ in a }.merging(Self.ntfyErrors) {
                a, _ in a
            })

        html.raw(
            "<section aria-labelledby=\"reporting-heading\">\n<h3 id=\"reporting-heading\">Reporting</h3>\n<p id=\"paused\">"
        )
        html.text(
            device.paused
                ? "Paused on the device: it sends nothing, and the server stores nothing from it, until it is resumed."
                : "On: the device reports its position.")
        html.raw(
            "</p>\n<p class=\"note\">The pause switch is on the device itself; the server shows it and cannot change it.</p>\n</section>\n"
        )

        sharesSection(&html, caller, form)
        retentionSection(&html, caller, form)
        ntfySection(&html, caller, form)
        importSection(&html, caller, form)
        presenceSection(&html, caller, form)
        eraseSection(&html, form)
        pageBottom(&html)
        return pageResponse(html, tileSource: "'none'")
    }

    func sharesSection(_ html: inout HTML, _ caller: Caller, _ form: FormDevice) {
        let id = String(form.device.id)
        html.raw("<section aria-labelledby=\"shares-heading\">\n<h3 id=\"shares-heading\">Shared with</h3>\n")
        let shares = identity.shares(of: form.device.id)
        if shares.isEmpty {
            html.raw("<p id=\"no-shares\">Nobody: only you see this device.</p>\n")
        } else {
            html.raw(
                "<table id=\"shares\">\n<thead><tr><th scope=\"col\">User</th><th scope=\"col\">Until</th><th scope=\"col\">State</th><th scope=\"col\">May</th><th scope=\"col\"><span class=\"visually-hidden\">Revoke</span></th></tr></thead>\n<tbody>\n"
            )
            for share in shares {
                html.raw("<tr><td>")
                html.name(share.user)
                html.raw("</td><td>")
                if let until = share.untilMicros { utcTime(&html, until) } else { html.raw("until revoked") }
                html.raw("</td><td>")
                html.raw(share.active ? "active" : "expired")
                html.raw("</td><td class=\"permission\">")
                html.raw(share.mayLocate ? "see and locate" : "see only")
                html.raw("</td><td>")
                formStart(&html, action: "/find-my/devices/\(id)/shares/revoke", caller: caller, inline: true)
                html.raw("<input type=\"hidden\" name=\"user\" value=\"")
                html.attribute(share.user)
                html.raw(
                    "\">\n<button type=\"submit\">Revoke<span class=\"visually-hidden\"> the share with ")
                html.name(share.user)
                html.raw("</span></button>\n</form></td></tr>\n")
            }
            html.raw("</tbody>\n</table>\n")
        }
        html.raw("<h4>Share with someone</h4>\n")
        formStart(&html, action: "/find-my/devices/\(id)/shares", caller: caller)
        html.raw(
            """
            <label for="share-user">User name</label>
            <input id="share-user" name="user" autocomplete="off" autocapitalize="none" required>
            <label for="share-until">Until (UTC; optional, empty: until you revoke it)</label>
            <input id="share-until" name="until" type="datetime-local">
            <label for="share-permission">They may</label>
            <select id="share-permission" name="permission">
            <option value="see" selected>see it only</option>
            <option value="locate">see it, and locate it, play a sound, mark it as lost</option>
            </select>
            <button type="submit">Share</button>
            </form>
            <p class="note">They see this device's position and history while the share lasts, nothing more: they cannot share it on, change its retention or erase it. With "locate" they may also ask it to report now, ring or show it is lost; you see every such command and who sent it. Sharing again with the same user changes the until and the permission.</p>
            </section>

            """)
    }

    func retentionSection(_ html: inout HTML, _ caller: Caller, _ form: FormDevice) {
        let (override, effective) = ingest.retentionDays(deviceID: form.device.id)
        html.raw(
            "<section aria-labelledby=\"retention-heading\">\n<h3 id=\"retention-heading\">Retention</h3>\n<p id=\"retention-now\">"
        )
        html.text(
            "Fixes are kept \(effective) day\(effective == 1 ? "" : "s"), "
                + (override == nil ? "the default window." : "this device's own setting."))
        html.raw("</p>\n")
        formStart(&html, action: "/find-my/devices/\(form.device.id)/retention", caller: caller)
        html.raw(
            """
            <label for="days">Days to keep (1 to 36500; empty: the default)</label>
            <input id="days" name="days" type="number" min="1" max="36500" inputmode="numeric" value="
            """)
        if let override { html.attribute(String(override)) }
        html.raw(
            """
            ">
            <button type="submit">Save</button>
            </form>
            <p class="note">Older fixes are deleted by the next compaction, from the database and from the log files.</p>
            </section>

            """)
    }

    func eraseSection(_ html: inout HTML, _ form: FormDevice) {
        html.raw(
            "<section aria-labelledby=\"erase-heading\">\n<h3 id=\"erase-heading\">Erase history</h3>\n<form method=\"get\" action=\""
        )
        html.attribute("/find-my/devices/\(form.device.id)/erase")
        html.raw(
            """
            ">
            <fieldset>
            <legend>What to erase</legend>
            <input type="radio" id="scope-all" name="scope" value="all" checked>
            <label for="scope-all" class="inline">Everything</label>
            <input type="radio" id="scope-range" name="scope" value="range">
            <label for="scope-range" class="inline">Fixes taken from one day to another</label>
            <label for="erase-from">From (UTC day, included)</label>
            <input id="erase-from" name="from" type="date">
            <label for="erase-to">To (UTC day, included)</label>
            <input id="erase-to" name="to" type="date">
            </fieldset>
            <button type="submit">Continue…</button>
            </form>
            <p class="note">The next page asks you to confirm; nothing is erased before.</p>
            </section>

            """)
    }

    // MARK: the settings' form posts

    func addShare(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        let back = form.settingsPath
        var until: Int64?
        if let text = form.fields["until"], !text.isEmpty {
            guard let micros = Self.parseLocalUTC(text) else {
                return redirect(back + "?error=invalid_until")
            }
            until = micros
        }
        do throws(APIError) {
            let permission = form.fields["permission"].flatMap { SharePermission(rawValue: $0) } ?? .see
            _ = try identity.shareDevice(
                form.device.id, owner: caller.userID, withUser: form.fields["user"] ?? "", untilMicros: until,
                permission: permission)
            return redirect(back + "?done=shared")
        } catch {
            let code =
                switch error.code {
                case .userNotFound, .invalidUntil: error.code.rawValue
                case .invalidField: "self"
                default: "failed"
                }
            return redirect(back + "?error=" + code)
        }
    }

    func revokeShare(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        do throws(APIError) {
            _ = try identity.unshareDevice(form.device.id, fromUser: form.fields["user"] ?? "")
            return redirect(form.settingsPath + "?done=revoked")
        } catch {
            let code =
                [.userNotFound, .shareNotFound].contains(error.code) ? "share_not_found" : "failed"
            return redirect(form.settingsPath + "?error=" + code)
        }
    }

    func setRetention(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        let text = (form.fields["days"] ?? "").trimmingCharacters(in: " ")
        var days: UInt32?
        if !text.isEmpty {
            guard let value = UInt32(text), value >= 1, value <= UInt32(IngestService.retentionDaysMax) else {
                return redirect(form.settingsPath + "?error=invalid_days")
            }
            days = value
        }
        do throws(APIError) {
            _ = try ingest.setRetention(deviceID: form.device.id, days: days)
            return redirect(form.settingsPath + "?done=retention")
        } catch {
            return redirect(form.settingsPath + "?error=failed")
        }
    }

    /// The range an erase form names: everything, or [start of `from` day, end of `to` day) in UTC.
    /// nil for a range form without valid days.
    static func eraseRange(scope: String?, from: String?, to: String?) -> (from: Int64?, to: Int64?)? {
        guard scope == "range" else { return (nil, nil) }
        guard let from, let to, let start = try? RFC3339.parseMicros(from + "T00:00:00Z"),
            let end = try? RFC3339.parseMicros(to + "T00:00:00Z"), start <= end
        else { return nil }
        return (start, end + 86_400_000_000)
    }

    func eraseConfirmation(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        let scope = request.query("scope")
        guard let range = Self.eraseRange(scope: scope, from: request.query("from"), to: request.query("to"))
        else { return redirect(form.settingsPath + "?error=invalid_range") }
        var html = HTML()
        pageTop(&html, title: "Erase history of \(form.device.name)", caller: caller)
        html.raw("<h2>Erase history of ")
        html.name(form.device.name)
        html.raw("?</h2>\n<p id=\"erase-what\">")
        if let from = range.from, let to = range.to {
            html.raw("The fixes taken from ")
            utcTime(&html, from)
            html.raw(" to ")
            utcTime(&html, to)
            html.raw(" will be erased.")
        } else {
            html.raw(
                "<strong>All</strong> of this device's history will be erased, its latest position included.")
        }
        html.raw(
            "</p>\n<p>This cannot be undone. The fixes leave the database at once and the log files at the next compaction; a backup taken earlier still holds them.</p>\n"
        )
        formStart(&html, action: "/find-my/devices/\(form.device.id)/erase", caller: caller)
        for (name, value) in [
            ("scope", scope ?? "all"), ("from", request.query("from") ?? ""),
            ("to", request.query("to") ?? ""),
        ] {
            html.raw("<input type=\"hidden\" name=\"")
            html.attribute(name)
            html.raw("\" value=\"")
            html.attribute(value)
            html.raw("\">\n")
        }
        html.raw("<button type=\"submit\" class=\"danger\">Erase history</button>\n</form>\n<p><a href=\"")
        html.attribute(form.settingsPath)
        html.raw("\">Cancel</a></p>\n")
        pageBottom(&html)
        return pageResponse(html, tileSource: "'none'")
    }

    func erase(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        guard
            let range = Self.eraseRange(
                scope: form.fields["scope"], from: form.fields["from"], to: form.fields["to"])
        else { return redirect(form.settingsPath + "?error=invalid_range") }
        do throws(APIError) {
            _ = try ingest.eraseHistory(deviceID: form.device.id, fromMicros: range.from, toMicros: range.to)
            return redirect(form.settingsPath + "?done=erased")
        } catch {
            return redirect(form.settingsPath + "?error=failed")
        }
    }

    /// A `datetime-local` value (`2026-12-24T18:00`, with or without seconds) read as UTC, or a full
    /// RFC 3339 time.
    static func parseLocalUTC(_ text: String) -> Int64? {
        if let micros = try? RFC3339.parseMicros(text) { return micros }
        if text.count == 16, let micros = try? RFC3339.parseMicros(text + ":00Z") { return micros }
        if text.count == 19, let micros = try? RFC3339.parseMicros(text + "Z") { return micros }
        return nil
    }
}
