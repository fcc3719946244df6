import Events

/// The ntfy topic each device is rung through (docs/commands.md, "ntfy"): event 41, folded here so
/// that the ntfy command channel and the device's owner read it without a database, and kept in
/// the registry snapshot (body version 10). The last event for a device wins, an empty URL clears
/// it, and the device's removal drops it; an event for a device that is unknown or removed is not
/// trusted.
extension Registry {
    /// The device's ntfy topic URL, nil when it has none or is not a live device.
    public func ntfyTopicURL(deviceID: UInt64) -> String? {
        guard liveDevice(deviceID) != nil else { return nil }
        return ntfyTopics[deviceID]
    }

    mutating func applyDeviceNtfy(_ event: Event) {
        switch event {
        case .deviceNtfySet(let set):
            guard liveDevice(set.deviceID) != nil else { return }
            ntfyTopics[set.deviceID] = set.topicURL.isEmpty ? nil : set.topicURL
        case .deviceRemoved(let removed):
            ntfyTopics[removed.deviceID] = nil
        default:
            break
        }
    }

    // Snapshot body, version 10: u32 count, then each topic as the payload of its type 41 event,
    // by device id.
    func encodeNtfyTopicsPart(_ w: inout ByteWriter) {
        w.u32(UInt32(ntfyTopics.count))
        for (deviceID, topicURL) in ntfyTopics.sorted(by: { $0.key < $1.key }) {
            w.u64(deviceID)
            w.string(topicURL)
        }
    }

    mutating func decodeNtfyTopicsPart(_ r: inout ByteReader) throws {
        for _ in 0..<(try r.u32()) {
            let deviceID = try r.u64()
            let topicURL = try r.string()
            guard liveDevice(deviceID) != nil, !topicURL.isEmpty, ntfyTopics[deviceID] == nil else {
                throw DecodeError.invalid("the ntfy topic of device \(deviceID) is inconsistent")
            }
            ntfyTopics[deviceID] = topicURL
        }
    }
}
