import HTTP
import Identity
import Ingest

// The device's ntfy topic on its settings page (docs/panel.md, docs/commands.md "ntfy"): the field,
// what goes there and what it cannot do, how to make the ntfy app ring through Do Not Disturb; and
// its form post, which sets it as the API does (`IngestService.setNtfyTopic`).

extension PanelService {
    static let ntfyFlashes: [String: String] = [
        "ntfy": "The ntfy topic is saved: “Play sound”, “Mark as lost” and “Found” go there too.",
        "ntfy_removed": "The ntfy topic is removed.",
    ]
    static let ntfyErrors: [String: String] = [
        "invalid_ntfy_url":
            "The ntfy topic must be the topic’s whole https:// (or http://) address, as the ntfy app shows it, without a user name or password; the server sends only to public addresses unless its operator allows others."
    ]

    func ntfySection(_ html: inout HTML, _ caller: Caller, _ form: FormDevice) {
        let topic = identity.ntfyTopicURL(deviceID: form.device.id)
        html.raw(
            "<section aria-labelledby=\"ntfy-heading\">\n<h3 id=\"ntfy-heading\">Ring through ntfy</h3>\n<p id=\"ntfy-now\">"
        )
        html.text(
            topic == nil
                ? "No ntfy topic: commands reach this device only through its own app."
                : "Commands also go to this ntfy topic.")
        html.raw("</p>\n")
        formStart(&html, action: "/find-my/devices/\(form.device.id)/ntfy", caller: caller)
        html.raw(
            """
            <label for="ntfy-topic">ntfy topic (its whole address; empty: none)</label>
            <input id="ntfy-topic" name="topic_url" type="url" maxlength="2048" placeholder="https://ntfy.sh/a-long-random-name" value="
            """)
        if let topic { html.attribute(topic) }
        html.raw(
            """
            ">
            <button type="submit">Save</button>
            </form>
            <p class="note" id="ntfy-what">Subscribe to the topic in the ntfy app on the phone, then put the topic’s address here. “Play sound” arrives there as a max-priority notification, “Mark as lost” as one with your message and phone number, “Found” as one that says so. “Locate now” cannot go through ntfy: a notification is read by a person, and no position comes back from it.</p>
            <p class="note" id="ntfy-dnd">To make the phone ring through Do Not Disturb: in the ntfy app for Android, open the topic’s settings and turn on “Keep alerting for highest priority” (the alert repeats until you open it), and allow ntfy to override Do Not Disturb in the app’s notification settings. Anyone who knows the topic’s name can read and send to it: choose a long random name, or your own ntfy server with access control.</p>
            </section>

            """)
    }

    func setNtfy(_ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        let topic = (form.fields["topic_url"] ?? "").trimmingCharacters(in: " ")
        do throws(APIError) {
            _ = try ingest.setNtfyTopic(deviceID: form.device.id, topicURL: topic)
            return redirect(form.settingsPath + (topic.isEmpty ? "?done=ntfy_removed" : "?done=ntfy"))
        } catch {
            return redirect(
                form.settingsPath
                    + (error.code == .invalidField ? "?error=invalid_ntfy_url" : "?error=failed"))
        }
    }
}
