import Core
import Events
import Identity
import Ingest
import JSON

/// Where the Friends view's positions come from: the projection's latest fix per device (what
/// the panel shows, so erasure and retention apply): `ProjectionFriends` over PostgreSQL, or a
/// source of a test's own.
public protocol FriendsSource: Sendable {
    /// The latest fix of each of `deviceIDs` that has one. Throws when the projection cannot be read.
    func latestFixes(_ deviceIDs: [UInt64]) throws -> [UInt64: Fix]
}

/// OwnTracks' Friends view in HTTP mode (docs/clients.md): the answer to a publish may carry
/// `_type: location` and `_type: card` messages of other people. Both apps file them under
/// `owntracks/http/<tid>` (Android `HttpMessageProcessorEndpoint.onFinalizeMessage`, iOS
/// `Connection.oneMessage`), so every device gets its own stable `tid`: its id in base 36.
extension ClientsService {
    /// Messages for every device the posting device's owner may see now (their own other devices,
    /// and devices shared with them while the share is active), never another. Empty without a
    /// `FriendsSource` or when the projection cannot be read: the publish itself succeeded.
    func friendsMessages(for deviceID: UInt64) -> [JSONValue] {
        guard let friends, let owner = ingest.identity.deviceOwner(deviceID) else { return [] }
        let visible = ingest.identity.visibleDevices(to: owner).filter { $0.deviceID != deviceID }
        guard !visible.isEmpty else { return [] }
        let names = ingest.identity.store.registry.read { state in
            visible.map { device -> (device: String, owner: String) in
                let entry = state.registry.liveDevice(device.deviceID)
                let ownerName = entry.flatMap { state.registry.users[$0.userID]?.name } ?? ""
                return (entry?.name ?? "", ownerName)
            }
        }
        guard let fixes = try? friends.latestFixes(visible.map(\.deviceID)) else { return [] }
        var messages: [JSONValue] = []
        for (device, name) in zip(visible, names) {
            let tid = Self.trackerID(device.deviceID)
            let topic = "owntracks/\(name.owner)/\(name.device)"
            if let fix = fixes[device.deviceID] {
                messages.append(.object(Self.location(fix, tid: tid, topic: topic)))
            }
            let cardName = device.sharedByUserID == nil ? name.device : "\(name.owner): \(name.device)"
            messages.append(
                .object([
                    "_type": .string("card"), "tid": .string(tid), "name": .string(cardName),
                    "topic": .string(topic),
                ]))
        }
        return messages
    }

    /// A device's `tid`: its id in base 36, two characters at least, unique per device.
    static func trackerID(_ deviceID: UInt64) -> String {
        let digits = String(deviceID, radix: 36, uppercase: true)
        return digits.count >= 2 ? digits : "0" + digits
    }

    /// A fix as OwnTracks' location message: `vel` back in km/h, whole numbers where the apps send them.
    static func location(_ fix: Fix, tid: String, topic: String) -> JSONObject {
        var members: [JSONObject.Member] = [
            .init(key: "_type", value: .string("location")), .init(key: "tid", value: .string(tid)),
            .init(key: "topic", value: .string(topic)),
            .init(key: "lat", value: .double(fix.latitude)), .init(key: "lon", value: .double(fix.longitude)),
            .init(key: "tst", value: .integer(fix.recordedAtMicros / 1_000_000)),
        ]
        func whole(_ key: String, _ value: Double?) {
            guard let value, value.isFinite, let integer = Int64(exactly: value.rounded()) else { return }
            members.append(.init(key: key, value: .integer(integer)))
        }
        whole("acc", fix.accuracyMeters)
        whole("alt", fix.altitudeMeters)
        whole("vel", fix.speedMetersPerSecond.map { $0 * 3.6 })
        whole("cog", fix.headingDegrees)
        if let battery = fix.batteryPercent {
            members.append(.init(key: "batt", value: .integer(Int64(battery))))
        }
        if let charging = fix.isCharging {
            members.append(.init(key: "bs", value: .integer(charging ? 2 : 1)))
        }
        return JSONObject(members)
    }
}
