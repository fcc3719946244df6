/// An event ready to be framed: its record header (salt and offset are the writer's to fill in)
/// and its payload as it will be stored.
public struct EncodedEvent: Sendable {
    public var header: RecordHeader
    public var payload: [UInt8]

    public init(header: RecordHeader, payload: [UInt8]) {
        self.header = header
        self.payload = payload
    }
}

/// Encodes events into record headers and payloads, and back.
public enum EventCodec {
    /// Payloads smaller than this are stored raw: LZ4 cannot win on them.
    static let compressBytesMin = 64

    /// The fix batch payload version `encode` writes (docs/log-format.md): 2, the decimal columns.
    public static let fixBatchVersionCurrent: UInt16 = 2

    /// `fixBatchVersion` exists so that tests and benchmarks can still write version 1, the
    /// payload every log before it holds; the server always writes the current version.
    public static func encode(
        _ event: Event, receivedAtMicros: Int64, fixBatchVersion: UInt16 = fixBatchVersionCurrent
    ) -> EncodedEvent {
        precondition(fixBatchVersion == 1 || fixBatchVersion == 2, "fix batch payload versions are 1 and 2")
        var type: UInt8
        var version: UInt16 = 1
        var fixCount: UInt32 = 0
        var recordedMin: Int64 = 0
        var recordedMax: Int64 = 0
        var deviceKey: UInt64 = 0
        var idempotencyKey = UUID128.zero
        var flags: UInt16 = 0
        var writer = ByteWriter()
        switch event {
        case .fixBatch(let batch):
            type = EventType.fixBatch.rawValue
            precondition(batch.fixes.count <= Int(UInt32.max))
            fixCount = UInt32(batch.fixes.count)
            (recordedMin, recordedMax) = recordedSpan(batch.fixes)
            deviceKey = batch.deviceID
            idempotencyKey = batch.batchID
            flags = UInt16(batch.clientProtocol.rawValue) << LogFormat.recordFlagProtocolShift
            version = fixBatchVersion
            writer.bytes = fixBatchPayload(batch, version: fixBatchVersion, recordedMinMicros: recordedMin)
        case .userCreated, .userTokenIssued, .deviceEnrolled, .deviceTokenIssued, .deviceTokenRevoked,
            .userPasswordSet, .userRoleChanged, .userTokenRotated:
            (type, deviceKey) = encodeIdentity(event, into: &writer)!
        case .pushTokenRegistered, .pushTokenInvalidated:
            (type, deviceKey, version) = encodePushToken(event, into: &writer)!
        case .reportingChanged, .shareGranted, .shareRevoked:
            (type, deviceKey) = encodeSharing(event, into: &writer)!
        case .retentionChanged, .historyErased, .deviceRemoved:
            (type, deviceKey) = encodeRetention(event, into: &writer)!
        case .regionTransition, .waypointsReported:
            (type, deviceKey, recordedMin, recordedMax) = encodePlace(event, into: &writer)!
        case .commandRequested, .commandSent, .commandDeliveryFailed, .commandAnswered, .commandExpired,
            .sharePermissionChanged:
            (type, deviceKey) = encodeCommand(event, into: &writer)!
        case .userSettingChanged(let changed):
            type = encodeSetting(changed, into: &writer)
        case .devicePresenceLinked, .presenceChanged:
            let presence = encodePresence(event, into: &writer)!
            (type, deviceKey) = (presence.type, presence.deviceKey)
            (recordedMin, recordedMax) = (presence.recordedMicros, presence.recordedMicros)
        case .geofenceDefined, .geofenceDeleted:
            type = encodeGeofence(event, into: &writer)!
        case .geofenceNotificationsSet(let set):
            type = encodeGeofenceNotify(set, into: &writer)
        case .historyImported(let imported):
            (type, deviceKey) = encodeHistoryImported(imported, into: &writer)
        case .deviceNtfySet(let set):
            (type, deviceKey) = encodeDeviceNtfy(set, into: &writer)
        case .foundNoticeSet(let set):
            (type, deviceKey) = encodeFoundNotice(set, into: &writer)
        case .unknown(let unknownType, let unknownVersion, let payload):
            type = unknownType
            version = unknownVersion
            writer.bytes = payload
        }
        let raw = writer.bytes
        precondition(
            raw.count <= LogFormat.recordBytesMax - LogFormat.recordHeaderBytes, "event payload too large")
        let (codec, stored) = storedForm(raw)
        let header = RecordHeader(
            type: type, codec: codec.rawValue, flags: flags, eventVersion: version,
            receivedAtMicros: receivedAtMicros,
            recordedMinMicros: recordedMin, recordedMaxMicros: recordedMax, fixCount: fixCount,
            uncompressedBytes: UInt32(raw.count), deviceKey: deviceKey, idempotencyKey: idempotencyKey)
        return EncodedEvent(header: header, payload: stored)
    }

    /// How a request's payload is stored: LZ4 from `compressBytesMin` bytes on when it wins, else raw.
    static func storedForm(_ raw: [UInt8]) -> (Codec, [UInt8]) {
        if raw.count >= compressBytesMin, let compressed = LZ4.compress(raw) { return (.lz4, compressed) }
        return (.none, raw)
    }

    /// A record as a request of its own, in the form `encode` gives it: a group member that the
    /// group stored raw because it was small (GroupRecord.member) is compressed again where
    /// `encode` would have compressed it. Anything else is kept as stored.
    public static func standalone(header: RecordHeader, stored: [UInt8]) -> EncodedEvent {
        guard header.codec == Codec.none.rawValue, header.flags & LogFormat.recordFlagEncryptionMask == 0,
            stored.count == Int(header.uncompressedBytes)
        else { return EncodedEvent(header: header, payload: stored) }
        let (codec, form) = storedForm(stored)
        var standalone = header
        standalone.codec = codec.rawValue
        return EncodedEvent(header: standalone, payload: form)
    }

    /// The payload as the event encoded it, undoing the record's codec.
    public static func rawPayload(header: RecordHeader, stored: [UInt8]) throws -> [UInt8] {
        guard header.flags & LogFormat.recordFlagEncryptionMask == 0 else {
            throw DecodeError.invalid("payload is encrypted with a scheme this findmy does not know")
        }
        switch Codec(rawValue: header.codec) {
        case .none?:
            guard stored.count == Int(header.uncompressedBytes) else {
                throw DecodeError.invalid(
                    "raw payload is \(stored.count) bytes, header says \(header.uncompressedBytes)")
            }
            return stored
        case .lz4?:
            return try LZ4.decompress(stored, uncompressedBytes: Int(header.uncompressedBytes))
        case nil:
            throw DecodeError.invalid("unknown payload codec \(header.codec)")
        }
    }

    public static func decode(header: RecordHeader, stored: [UInt8]) throws -> Event {
        guard let type = EventType(rawValue: header.type),
            header.eventVersion == 1
                || (header.eventVersion == 2 && (type == .pushTokenRegistered || type == .fixBatch))
        else {
            return .unknown(type: header.type, version: header.eventVersion, payload: stored)
        }
        if header.isPayloadRemoved {
            throw DecodeError.invalid("the payload of record \(header.offset) was removed by the compactor")
        }
        let payload = try rawPayload(header: header, stored: stored)
        if type == .fixBatch { return .fixBatch(try decodeFixBatch(header: header, payload: payload)) }
        var reader = ByteReader(payload)
        let event: Event
        switch type {
        case .fixBatch:
            preconditionFailure("handled above")
        case .userCreated, .userTokenIssued, .deviceEnrolled, .deviceTokenIssued, .deviceTokenRevoked,
            .userPasswordSet, .userRoleChanged, .userTokenRotated:
            event = try decodeIdentity(type, &reader)!
        case .pushTokenRegistered, .pushTokenInvalidated:
            event = try decodePushToken(type, version: header.eventVersion, &reader)!
        case .reportingChanged, .shareGranted, .shareRevoked:
            event = try decodeSharing(type, &reader)!
        case .retentionChanged, .historyErased, .deviceRemoved:
            event = try decodeRetention(type, &reader)!
        case .regionTransition, .waypointsReported:
            event = try decodePlace(type, &reader)!
        case .commandRequested, .commandSent, .commandDeliveryFailed, .commandAnswered, .commandExpired,
            .sharePermissionChanged:
            event = try decodeCommand(type, &reader)!
        case .userSettingChanged:
            event = try decodeSetting(&reader)
        case .devicePresenceLinked, .presenceChanged:
            event = try decodePresence(type, &reader)!
        case .geofenceDefined, .geofenceDeleted:
            event = try decodeGeofence(type, &reader)!
        case .geofenceNotificationsSet:
            event = try decodeGeofenceNotify(&reader)
        case .historyImported:
            event = try decodeHistoryImported(&reader)
        case .deviceNtfySet:
            event = try decodeDeviceNtfy(&reader)
        case .foundNoticeSet:
            event = try decodeFoundNotice(&reader)
        }
        guard reader.remaining == 0 else {
            throw DecodeError.invalid("\(reader.remaining) unexpected bytes after a \(type.name) event")
        }
        return event
    }

    /// Users and devices: creation, enrolment, tokens, passwords, roles.
    private static func encodeIdentity(_ event: Event, into writer: inout ByteWriter) -> (
        type: UInt8, deviceKey: UInt64
    )? {
        switch event {
        case .userCreated(let user):
            writer.u64(user.userID)
            writer.string(user.name)
            writer.u8(user.role.rawValue)
            writeHash(user.tokenHash, to: &writer)
            return (EventType.userCreated.rawValue, 0)
        case .userTokenIssued(let issued):
            writer.u64(issued.userID)
            writeHash(issued.tokenHash, to: &writer)
            return (EventType.userTokenIssued.rawValue, 0)
        case .deviceEnrolled(let device):
            writer.u64(device.deviceID)
            writer.u64(device.userID)
            writer.raw(device.deviceUUID.bytes)
            writer.string(device.name)
            writer.string(device.platform)
            writer.string(device.model)
            return (EventType.deviceEnrolled.rawValue, device.deviceID)
        case .deviceTokenIssued(let issued):
            writer.u64(issued.deviceID)
            writeHash(issued.tokenHash, to: &writer)
            return (EventType.deviceTokenIssued.rawValue, issued.deviceID)
        case .deviceTokenRevoked(let revoked):
            writer.u64(revoked.deviceID)
            writeHash(revoked.tokenHash, to: &writer)
            return (EventType.deviceTokenRevoked.rawValue, revoked.deviceID)
        case .userPasswordSet(let set):
            writer.u64(set.userID)
            writer.string(set.passwordHash)
            return (EventType.userPasswordSet.rawValue, 0)
        case .userRoleChanged(let change):
            writer.u64(change.userID)
            writer.u8(change.role.rawValue)
            return (EventType.userRoleChanged.rawValue, 0)
        case .userTokenRotated(let rotated):
            writer.u64(rotated.userID)
            writeHash(rotated.tokenHash, to: &writer)
            return (EventType.userTokenRotated.rawValue, 0)
        default:
            return nil
        }
    }

    /// The events `encodeIdentity` writes.
    private static func decodeIdentity(_ type: EventType, _ reader: inout ByteReader) throws -> Event? {
        switch type {
        case .userCreated:
            let userID = try reader.u64()
            let name = try reader.string()
            guard let role = Role(rawValue: try reader.u8()) else {
                throw DecodeError.invalid("unknown role")
            }
            return .userCreated(
                UserCreated(userID: userID, name: name, role: role, tokenHash: try readHash(&reader)))
        case .userTokenIssued:
            return .userTokenIssued(
                UserTokenIssued(userID: try reader.u64(), tokenHash: try readHash(&reader)))
        case .deviceEnrolled:
            let deviceID = try reader.u64()
            let userID = try reader.u64()
            let uuid = UUID128(bytes: try reader.raw(16))
            return .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: deviceID, userID: userID, deviceUUID: uuid, name: try reader.string(),
                    platform: try reader.string(), model: try reader.string()))
        case .deviceTokenIssued:
            return .deviceTokenIssued(
                DeviceTokenIssued(deviceID: try reader.u64(), tokenHash: try readHash(&reader)))
        case .deviceTokenRevoked:
            return .deviceTokenRevoked(
                DeviceTokenRevoked(deviceID: try reader.u64(), tokenHash: try readHash(&reader)))
        case .userPasswordSet:
            return .userPasswordSet(
                UserPasswordSet(userID: try reader.u64(), passwordHash: try reader.string()))
        case .userRoleChanged:
            let userID = try reader.u64()
            guard let role = Role(rawValue: try reader.u8()) else {
                throw DecodeError.invalid("unknown role")
            }
            return .userRoleChanged(UserRoleChanged(userID: userID, role: role))
        case .userTokenRotated:
            return .userTokenRotated(
                UserTokenRotated(userID: try reader.u64(), tokenHash: try readHash(&reader)))
        default:
            return nil
        }
    }

    /// Who sees a device: its reporting paused or resumed, its shares granted and revoked.
    private static func encodeSharing(_ event: Event, into writer: inout ByteWriter) -> (
        type: UInt8, deviceKey: UInt64
    )? {
        switch event {
        case .reportingChanged(let change):
            writer.u64(change.deviceID)
            writer.u8(change.paused ? 1 : 0)
            return (EventType.reportingChanged.rawValue, change.deviceID)
        case .shareGranted(let share):
            writer.u64(share.deviceID)
            writer.u64(share.granteeUserID)
            writer.u8(share.untilMicros == nil ? 0 : 1)
            writer.u64(UInt64(bitPattern: share.untilMicros ?? 0))
            return (EventType.shareGranted.rawValue, share.deviceID)
        case .shareRevoked(let share):
            writer.u64(share.deviceID)
            writer.u64(share.granteeUserID)
            return (EventType.shareRevoked.rawValue, share.deviceID)
        default:
            return nil
        }
    }

    /// The events `encodeSharing` writes.
    private static func decodeSharing(_ type: EventType, _ reader: inout ByteReader) throws -> Event? {
        switch type {
        case .reportingChanged:
            let deviceID = try reader.u64()
            let paused = try reader.u8()
            guard paused <= 1 else { throw DecodeError.invalid("paused flag \(paused) is not 0 or 1") }
            return .reportingChanged(ReportingChanged(deviceID: deviceID, paused: paused == 1))
        case .shareGranted:
            let deviceID = try reader.u64()
            let granteeUserID = try reader.u64()
            let hasUntil = try reader.u8()
            let until = Int64(bitPattern: try reader.u64())
            guard hasUntil <= 1 else { throw DecodeError.invalid("until flag \(hasUntil) is not 0 or 1") }
            return .shareGranted(
                ShareGranted(
                    deviceID: deviceID, granteeUserID: granteeUserID, untilMicros: hasUntil == 1 ? until : nil
                ))
        case .shareRevoked:
            return .shareRevoked(ShareRevoked(deviceID: try reader.u64(), granteeUserID: try reader.u64()))
        default:
            return nil
        }
    }

    /// A phone's push address, registered and found dead. A registration with Web Push keys is
    /// version 2, which appends them; one without stays version 1, so a log without UnifiedPush
    /// keys is still read by a findmy that knows only version 1.
    private static func encodePushToken(_ event: Event, into writer: inout ByteWriter) -> (
        type: UInt8, deviceKey: UInt64, version: UInt16
    )? {
        switch event {
        case .pushTokenRegistered(let push):
            writer.u64(push.deviceID)
            writer.string(push.provider)
            writer.string(push.token)
            writer.string(push.topic)
            writer.string(push.environment)
            guard !push.webPushPublicKey.isEmpty || !push.webPushAuthSecret.isEmpty else {
                return (EventType.pushTokenRegistered.rawValue, push.deviceID, 1)
            }
            writer.bytes16(push.webPushPublicKey)
            writer.bytes16(push.webPushAuthSecret)
            return (EventType.pushTokenRegistered.rawValue, push.deviceID, 2)
        case .pushTokenInvalidated(let push):
            writer.string(push.provider)
            writer.string(push.token)
            writer.string(push.reason)
            return (EventType.pushTokenInvalidated.rawValue, 0, 1)
        default:
            return nil
        }
    }

    /// The events `encodePushToken` writes, of the record's `version`.
    private static func decodePushToken(_ type: EventType, version: UInt16, _ reader: inout ByteReader) throws
        -> Event?
    {
        switch type {
        case .pushTokenRegistered:
            var push = PushTokenRegistered(
                deviceID: try reader.u64(), provider: try reader.string(), token: try reader.string(),
                topic: try reader.string(), environment: try reader.string())
            if version == 2 {
                push.webPushPublicKey = try reader.bytes16()
                push.webPushAuthSecret = try reader.bytes16()
            }
            return .pushTokenRegistered(push)
        case .pushTokenInvalidated:
            return .pushTokenInvalidated(
                PushTokenInvalidated(
                    provider: try reader.string(), token: try reader.string(), reason: try reader.string()))
        default:
            return nil
        }
    }

    /// The earliest and latest recorded time of a batch's fixes; (0, 0) for a batch without fixes.
    private static func recordedSpan(_ fixes: [Fix]) -> (min: Int64, max: Int64) {
        guard let first = fixes.first else { return (0, 0) }
        return (
            fixes.reduce(first.recordedAtMicros) { min($0, $1.recordedAtMicros) },
            fixes.reduce(first.recordedAtMicros) { max($0, $1.recordedAtMicros) }
        )
    }

    /// A fix batch's payload: version 2 the decimal columns, version 1 the fixes then the rejections.
    private static func fixBatchPayload(_ batch: FixBatch, version: UInt16, recordedMinMicros: Int64)
        -> [UInt8]
    {
        if version == 2 { return FixCodecV2.encode(batch, recordedMinMicros: recordedMinMicros) }
        var writer = ByteWriter()
        writer.bytes = FixCodec.encode(batch.fixes)
        writer.u32(UInt32(batch.rejections.count))
        for rejection in batch.rejections {
            writer.u32(rejection.index)
            writer.string(rejection.reason)
        }
        return writer.bytes
    }

    /// A fix batch of either payload version; the device, batch id and protocol are the header's.
    private static func decodeFixBatch(header: RecordHeader, payload: [UInt8]) throws -> FixBatch {
        let fixes: [Fix]
        var rejections: [Rejection] = []
        if header.eventVersion == 2 {
            (fixes, rejections) = try FixCodecV2.decode(
                payload, expectedCount: Int(header.fixCount), recordedMinMicros: header.recordedMinMicros)
        } else {
            var reader = ByteReader(payload)
            fixes = try FixCodec.decode(&reader, expectedCount: Int(header.fixCount))
            let rejectionCount = Int(try reader.u32())
            guard rejectionCount <= reader.remaining / 6 else {
                throw DecodeError.invalid("rejection count \(rejectionCount) too large")
            }
            for _ in 0..<rejectionCount {
                rejections.append(Rejection(index: try reader.u32(), reason: try reader.string()))
            }
            guard reader.remaining == 0 else {
                throw DecodeError.invalid("\(reader.remaining) unexpected bytes after a fix batch")
            }
        }
        return FixBatch(
            deviceID: header.deviceKey, batchID: header.idempotencyKey, fixes: fixes,
            rejections: rejections, clientProtocol: header.clientProtocol)
    }

    static let tokenHashBytes = 32

    private static func writeHash(_ hash: [UInt8], to writer: inout ByteWriter) {
        precondition(hash.count == tokenHashBytes, "token hashes are SHA-256, 32 bytes")
        writer.raw(hash)
    }

    private static func readHash(_ reader: inout ByteReader) throws -> [UInt8] {
        Array(try reader.raw(tokenHashBytes))
    }
}

extension ByteWriter {
    /// u16 length + bytes: short binary fields (keys) in event payloads.
    fileprivate mutating func bytes16(_ bytes: [UInt8]) {
        precondition(bytes.count <= Int(UInt16.max))
        u16(UInt16(bytes.count))
        raw(bytes)
    }
}

extension ByteReader {
    fileprivate mutating func bytes16() throws -> [UInt8] { Array(try raw(Int(try u16()))) }
}
