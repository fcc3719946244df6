import Events

/// "Notify when found" (docs/found-notices.md): which devices their owner asked to hear of when
/// they report again, folded from the log (event 42) so that the API answers without a database
/// and a replay, the geofence projection's fold included, decides the same.
///
/// The rule, in log order: `found_notice_set` by the device's owner arms or disarms it; the
/// device's first fix batch with at least one accepted fix at a later offset fires it (the geofence
/// projection records the notice) and disarms it; removing the device disarms it. Kept in the
/// registry snapshot (body version 10), with the owners' alert targets (user settings).
extension Registry {
    /// An armed notice: who asked, and the record that armed it.
    public struct FoundNotice: Equatable, Sendable {
        public var userID: UInt64
        public var armedOffset: UInt64
        /// The arming record's `received_at`; nil only when folded from an event without its record
        /// (a test's direct `apply`), never on the server's paths.
        public var armedAtMicros: Int64?

        public init(userID: UInt64, armedOffset: UInt64, armedAtMicros: Int64?) {
            self.userID = userID
            self.armedOffset = armedOffset
            self.armedAtMicros = armedAtMicros
        }
    }

    /// The armed notice of `deviceID`, if any.
    public func foundNotice(deviceID: UInt64) -> FoundNotice? { foundNotices[deviceID] }

    mutating func applyFoundNotice(_ event: Event, offset: UInt64, receivedAtMicros: Int64?) {
        switch event {
        case .foundNoticeSet(let set):
            // Only the device's owner arms it: an event naming anyone else is not trusted.
            guard liveDevice(set.deviceID)?.userID == set.userID else { return }
            foundNotices[set.deviceID] =
                set.armed
                ? FoundNotice(userID: set.userID, armedOffset: offset, armedAtMicros: receivedAtMicros) : nil
        case .fixBatch(let batch):
            fireFoundNotice(deviceID: batch.deviceID, acceptedFixes: batch.fixes.count, offset: offset)
        case .deviceRemoved(let removed):
            foundNotices[removed.deviceID] = nil
        default:
            break
        }
    }

    /// A batch fires the notice armed before it, if it holds a fix: one refused whole is not the
    /// device reporting its position.
    mutating func fireFoundNotice(deviceID: UInt64, acceptedFixes: Int, offset: UInt64) {
        guard acceptedFixes > 0, let notice = foundNotices[deviceID], offset > notice.armedOffset else {
            return
        }
        foundNotices[deviceID] = nil
    }

    // Snapshot body, version 10: u32 count, then each user with an alert target (u64 id, string
    // ntfy URL, string webhook URL); u32 count, then each armed notice (u64 device, u64 user, u64
    // offset, u8 flag [i64 armed-at µs]), by device id.
    func encodeFoundNoticePart(_ w: inout ByteWriter) {
        let targets = users.values.filter { !$0.notifyNtfyURL.isEmpty || !$0.notifyWebhookURL.isEmpty }
            .sorted { $0.id < $1.id }
        w.u32(UInt32(targets.count))
        for user in targets {
            w.u64(user.id)
            w.string(user.notifyNtfyURL)
            w.string(user.notifyWebhookURL)
        }
        w.u32(UInt32(foundNotices.count))
        for (deviceID, notice) in foundNotices.sorted(by: { $0.key < $1.key }) {
            w.u64(deviceID)
            w.u64(notice.userID)
            w.u64(notice.armedOffset)
            w.u8(notice.armedAtMicros == nil ? 0 : 1)
            if let micros = notice.armedAtMicros { w.i64(micros) }
        }
    }

    mutating func decodeFoundNoticePart(_ r: inout ByteReader) throws {
        for _ in 0..<(try r.u32()) {
            let id = try r.u64()
            guard users[id] != nil else {
                throw DecodeError.invalid("alert targets for user \(id), whom the snapshot does not hold")
            }
            users[id]?.notifyNtfyURL = try r.string()
            users[id]?.notifyWebhookURL = try r.string()
        }
        for _ in 0..<(try r.u32()) {
            let deviceID = try r.u64()
            let userID = try r.u64()
            let offset = try r.u64()
            let armedAt: Int64? =
                switch try r.u8() {
                case 0: nil
                case 1: try r.i64()
                case let flag: throw DecodeError.invalid("found notice flag \(flag)")
                }
            guard liveDevice(deviceID)?.userID == userID, foundNotices[deviceID] == nil else {
                throw DecodeError.invalid("the found notice of device \(deviceID) is inconsistent")
            }
            foundNotices[deviceID] = FoundNotice(userID: userID, armedOffset: offset, armedAtMicros: armedAt)
        }
    }
}
