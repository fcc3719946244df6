import Core
import Events
import Identity

extension IngestService {
    /// Who a message on a broker topic belongs to.
    public enum TopicDevice: Sendable, Equatable {
        /// The device; `enrolled` when this call enrolled it (its first message).
        case device(UInt64, enrolled: Bool)
        /// No findmy user has the topic's user name: nothing enrolled.
        case unknownUser
        /// The topic's device name is not a name findmy accepts (docs/api.md, "Names").
        case invalidDeviceName(String)
        /// The owner removed the topic's device (`deviceID`, the last one with that UUID): nothing
        /// is enrolled. The owner enrols the UUID again (`POST /api/find-my/devices`) to take it back.
        case removed(deviceID: UInt64)
    }

    /// The device `deviceName` of the user named `userName`, identified by `uuid` (derived from the
    /// topic by the caller, so the same topic is always the same device), enrolled on first sight
    /// with the same `device_enrolled` event the enrolment endpoint appends, durable before this
    /// returns. No device token is issued: the broker's login and ACL are the message's credentials.
    /// A device the owner removed stays removed: its messages find `.removed` until the owner
    /// enrols a device with the same UUID (docs/clients.md). The registry keeps removed devices
    /// (their ids are never reused), so this holds across restarts and snapshots.
    public func topicDevice(userName: String, deviceName: String, uuid: UUID128, platform: String)
        throws(APIError) -> TopicDevice
    {
        let known = registry.read { state -> (userID: UInt64?, deviceID: UInt64?, removedID: UInt64?) in
            guard let user = state.registry.user(named: userName) else { return (nil, nil, nil) }
            return (
                user.id, state.registry.device(userID: user.id, uuid: uuid)?.id,
                state.registry.removedDevice(userID: user.id, uuid: uuid)?.id
            )
        }
        guard let userID = known.userID else { return .unknownUser }
        if let deviceID = known.deviceID { return .device(deviceID, enrolled: false) }
        if let removedID = known.removedID { return .removed(deviceID: removedID) }
        do {
            try identity.checkText(deviceName, field: "device name", allowEmpty: false)
            try NameRules.check(deviceName, field: "device name")
            try NameRules.checkTrimmed(deviceName, field: "device name")
        } catch {
            return .invalidDeviceName(error.message)
        }
        let enrolment = try identity.store.mutations.withLock { _ throws(APIError) -> TopicDevice in
            let (existing, removed, nextID) = registry.read {
                (
                    $0.registry.device(userID: userID, uuid: uuid)?.id,
                    $0.registry.removedDevice(userID: userID, uuid: uuid)?.id, $0.registry.nextDeviceID
                )
            }
            if let existing { return .device(existing, enrolled: false) }
            // Removed between the look above and this lock.
            if let removed { return .removed(deviceID: removed) }
            _ = try appendAndApply(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: nextID, userID: userID, deviceUUID: uuid, name: deviceName,
                        platform: platform,
                        model: "")),
                receivedAtMicros: clockMicros())
            return .device(nextID, enrolled: true)
        }
        if case .device(let deviceID, true) = enrolment {
            StructuredLog.info(
                "device_enrolled",
                [
                    "user_id": .int(Int64(userID)), "device_id": .int(Int64(deviceID)),
                    "platform": .string(platform),
                ])
        }
        return enrolment
    }
}
