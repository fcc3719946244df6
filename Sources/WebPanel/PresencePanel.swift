import Core
import HTTP
import Identity
import Presence

// Presence from the tailnet in the panel (docs/presence.md, docs/panel.md): the device page's line
// ("online on the tailnet", "offline, last seen 2 h ago") with the plain warning that it tells
// reachability, not location; the settings page's link form; its post.

extension PanelPage {
    /// The one sentence, in the device list's row and in the details alike: a `span.presence` that
    /// panel.js rewrites from the device JSON's `presence` on every live update.
    func presenceState(_ html: inout HTML, _ view: PresenceView) {
        html.raw("<span class=\"presence\">")
        if view.online {
            html.text("online on the tailnet")
        } else if let at = view.atMicros {
            html.text("offline, last seen ")
            html.raw("<span class=\"ago\" data-at=\"")
            html.attribute(stamp(at))
            html.raw("\">")
            html.text(relative(at))
            html.raw("</span>")
        } else {
            html.text("offline, not seen by the tailnet since it was linked")
        }
        html.raw("</span>")
    }

    func presenceRows(_ html: inout HTML, _ device: PanelDevice) {
        guard let view = presence[device.id] else { return }
        html.raw("<dt>Tailnet</dt><dd id=\"presence\">")
        presenceState(&html, view)
        // Always there, empty while online: panel.js fills it when a live update says offline.
        html.raw(" <span class=\"when\">")
        if !view.online, let at = view.atMicros { html.text("(" + utcText(at) + ")") }
        html.raw("</span>")
        html.raw("</dd>\n<dd class=\"note\" id=\"presence-note\">")
        html.text(
            "The tailnet (node “\(view.nodeName)”) tells whether the device is reachable, not where it is: the map shows only positions the device reported itself."
        )
        html.raw("</dd>\n")
    }
}

extension PanelService {
    static let presenceFlashes: [String: String] = [
        "presence_linked": "The device is linked to the tailnet node.",
        "presence_unlinked": "The device is no longer linked to a tailnet node.",
    ]
    static let presenceErrors: [String: String] = [
        "presence_node_not_found": "That node is not among your tailnet nodes.",
        "presence_unavailable": "The tailnet's control server has not answered yet. Try again in a minute.",
    ]

    func presenceSection(_ html: inout HTML, _ caller: Caller, _ form: FormDevice) {
        guard let presence else { return }
        let link = identity.registrySnapshot.presence.links[form.device.id]
        html.raw(
            "<section aria-labelledby=\"presence-heading\">\n<h3 id=\"presence-heading\">Tailnet presence</h3>\n<p id=\"presence-link\">"
        )
        html.text(
            link.map { "Linked to the tailnet node “\($0.nodeName)”." }
                ?? "Not linked: the panel shows no tailnet presence for this device.")
        html.raw("</p>\n")
        let nodes: [LinkableNode]
        do {
            nodes = try presence.linkableNodes(userID: caller.userID)
        } catch {
            html.raw("<p class=\"note\" id=\"presence-unavailable\">")
            html.text(error.message)
            html.raw("</p>\n</section>\n")
            return
        }
        formStart(&html, action: "/find-my/devices/\(form.device.id)/presence", caller: caller)
        html.raw("<label for=\"headscale-node\">Node</label>\n<select id=\"headscale-node\" name=\"node\">\n")
        html.raw("<option value=\"\">(not linked)</option>\n")
        for node in nodes {
            html.raw("<option value=\"")
            html.attribute(node.id)
            html.raw(link?.nodeID == node.id ? "\" selected>" : "\">")
            html.text(node.name + (node.online ? " (online)" : ""))
            html.raw("</option>\n")
        }
        html.raw(
            """
            </select>
            <button type="submit">Save</button>
            </form>
            <p class="note">Only the nodes of your own tailnet user are offered. The tailnet tells whether the device is reachable and when it was last seen, not where it is.</p>
            </section>

            """)
    }

    func setPresence(_ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        guard let presence else { return redirect(form.settingsPath + "?error=presence_unavailable") }
        let node = (form.fields["node"] ?? "").trimmingCharacters(in: " ")
        do throws(APIError) {
            try presence.link(
                deviceID: form.device.id, userID: caller.userID, node: node.isEmpty ? nil : node)
            return redirect(
                form.settingsPath + "?done=" + (node.isEmpty ? "presence_unlinked" : "presence_linked"))
        } catch {
            let known = Self.presenceErrors[error.code.rawValue] != nil
            return redirect(form.settingsPath + "?error=" + (known ? error.code.rawValue : "failed"))
        }
    }
}
