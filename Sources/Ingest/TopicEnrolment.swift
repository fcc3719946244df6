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
    }

    /// The device `deviceName` of the user named `userName`, identified by `uuid` (derived from the
    /// topic by the caller, so the same topic is always the same device), enrolled on first sight
    /// with the same `device_enrolled` event the enrolment endpoint appends, durable before this
    /// returns. No device token is issued: the broker's login and ACL are the message's credentials.
    /// A device the owner removed is enrolled again (under a new id) by its next message: revoke
    /// the broker login to stop a phone (docs/clients.md).
    public func topicDevice(userName: String, deviceName: String, uuid: UUID128, platform: String)
        throws(APIError) -> TopicDevice
    {
        let known = registry.read { state -> (userID: UInt64?, deviceID: UInt64?) in
            guard let user = state.registry.user(named: userName) else { return (nil, nil) }
            return (user.id, state.registry.device(userID: user.id, uuid: uuid)?.id)
        }
        guard let userID = known.userID else { return .unknownUser }
        if let deviceID = known.deviceID { return .device(deviceID, enrolled: false) }
        do {
            try identity.checkText(deviceName, field: "device name", allowEmpty: false)
            try NameRules.check(deviceName, field: "device name")
        } catch {
            return .invalidDeviceName(error.message)
        }
        let (deviceID, enrolled) = try identity.mutations.withLock { _ throws(APIError) -> (UInt64, Bool) in
            let (existing, nextID) = registry.read {
                ($0.registry.device(userID: userID, uuid: uuid)?.id, $0.registry.nextDeviceID)
            }
            if let existing { return (existing, false) }
            _ = try appendAndApply(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: nextID, userID: userID, deviceUUID: uuid, name: deviceName,
                        platform: platform,
                        model: "")),
                receivedAtMicros: clockMicros())
            return (nextID, true)
        }
        if enrolled {
            StructuredLog.info(
                "device_enrolled",
                [
                    "user_id": .int(Int64(userID)), "device_id": .int(Int64(deviceID)),
                    "platform": .string(platform),
                ])
        }
        return .device(deviceID, enrolled: enrolled)
    }
}
