import HTTP
import Identity

/// "Notify when found" from the device card (docs/found-notices.md): `POST
/// /find-my/devices/{id}/notify-when-found` with `armed` = `true` or `false`, the session's CSRF
/// token, the device's owner only (anyone else: "Device not found"). Back to the device on the map
/// with the sheet as it was (`sheet`);
/// arming without an alert target leads to the account page, which says what to set.
extension PanelService {
    static let foundNoticeErrors: [String: String] = [
        "no_alert_target":
            "\"Notify when found\" needs somewhere to notify you: set an ntfy topic or a webhook below, then arm it again from the device's card."
    ]

    func addFoundNoticeRoute(to router: inout GuardedRouter) {
        router.add("POST", "/find-my/devices/{id}/notify-when-found") { [self] request, gate in
            withOwnedDevice(request, gate, form: true) { caller, form in setFoundNotice(caller, form) }
        }
    }

    func setFoundNotice(_ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        var back = "/find-my?selected=\(form.device.id)"
        // A phone's sheet pulled up or down stays so (`half`, the default, is no parameter).
        if let sheet = form.fields["sheet"].flatMap(PanelPage.SheetState.init(rawValue:)), sheet != .half {
            back += "&sheet=" + sheet.rawValue
        }
        let armed: Bool
        switch form.fields["armed"] {
        case "true": armed = true
        case "false": armed = false
        default: return redirect(back + "&error=invalid_setting")
        }
        do throws(APIError) {
            _ = try identity.setFoundNotice(
                deviceID: form.device.id, userID: caller.userID, armed: armed, via: "panel")
            return redirect(back)
        } catch {
            if error.code == .noAlertTarget { return redirect("/find-my/account?error=no_alert_target") }
            return redirect(back + "&error=failed")
        }
    }
}
