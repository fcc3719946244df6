import Events

// The body of a registry snapshot (docs/snapshots.md, "Body"): every stored field of `Registry`,
// in this order, counts as u32, optionals as a u8 flag then the value, byte strings as u16 length
// + bytes. The derived indexes are stored as they are rather than rebuilt, so that a loaded
// registry is the folded one field for field, not one that a rebuild is believed to reproduce.
//
//   retention settings (u64 days, u64 arrival days), policy (device→user, device days, user days,
//   erasures per device in log order, removal offsets), users, devices, push tokens, shares,
//   user ids by name, device ids by (user, uuid), device ids by user, principals by token hash,
//   token hashes by user, recent batch rings (results, eviction order, head), nextOffset;
//   version 2 appends: the Web Push keys of the push tokens that have them (provider, token, public
//   key, auth secret); version 3 appends share permissions and the open commands.
//   Version 4 appends the users whose OwnTracks Friends setting is on (count, user ids).
//   Version 5 appends presence: the links (count, device, node id, node name) and the
//   last states (count, device, online u8, optional lastSeen, changedAt).
//   Version 6 appends the geofences (GeofenceBook.swift).
//   Version 7 appends the geofences' notification settings (FenceNotifySettings.swift).
//   Version 9 appends the fix batches of imports (ImportedBatches.swift).
//   Version 10 adds to each open command the offset of its command_requested (the command
//   stream's event id), after its requested-at time, and appends the devices' ntfy topics
//   (DeviceNtfyTopics.swift), the users' alert targets and the armed found notices
//   (FoundNotices.swift).
//   Only a version 10 body is read: an older one holds no request offsets (a command stream could
//   not say which commands a resuming client already has) nor found notices, and one before 9 no
//   import batches (RegistrySnapshot.swift).

extension Registry {
    func encodeBody() -> [UInt8] {
        var w = ByteWriter(capacity: 1 << 16)
        encodeRetentionPart(&w)
        encodeAccountsPart(&w)
        encodeIndexesPart(&w)
        encodeRecentBatchesPart(&w)
        w.u64(nextOffset)
        // Version 2: the Web Push keys of the push tokens that have them, after everything else.
        let withKeys = pushTokens.filter {
            !$0.value.webPushPublicKey.isEmpty || !$0.value.webPushAuthSecret.isEmpty
        }
        w.u32(UInt32(withKeys.count))
        for (key, registration) in withKeys {
            w.string(key.provider)
            w.string(key.token)
            w.byteString(registration.webPushPublicKey)
            w.byteString(registration.webPushAuthSecret)
        }
        // Version 3: the share permissions and the command book.
        encodeCommandPart(&w)
        // Version 4: the users who turned OwnTracks' Friends view on.
        let friends = users.values.filter(\.owntracksFriends).map(\.id)
        w.u32(UInt32(friends.count))
        for id in friends { w.u64(id) }
        // Version 5: presence links and states.
        encodePresencePart(&w)
        // Version 6: the geofences (GeofenceBook.swift).
        encodeGeofencePart(&w)
        // Version 7: where each geofence's transitions are announced.
        encodeGeofenceNotificationPart(&w)
        // Version 9: the fix batches of imports (ImportedBatches.swift).
        encodeImportedBatchesPart(&w)
        // Version 10: the devices' ntfy topics, the users' alert targets and the armed found notices.
        encodeNtfyTopicsPart(&w)
        encodeFoundNoticePart(&w)
        return w.bytes
    }

    /// A version 10 body: every part `encodeBody` writes, in its order. Older versions are not
    /// read (`RegistrySnapshotFormat.versionsRead`): they lack the commands' request offsets and
    /// the found notices (and before 9 the import batches).
    static func decodeBody(_ r: inout ByteReader, recentBatchesPerDeviceMax: Int) throws -> Registry {
        var registry = Registry(recentBatchesPerDeviceMax: recentBatchesPerDeviceMax)
        let settings = RetentionSettings(retentionDays: try r.int(), arrivalsRetentionDays: try r.int())
        registry.retention = try decodePolicy(&r, settings: settings)
        try registry.decodeAccountsPart(&r)
        try registry.decodeIndexesPart(&r)
        try registry.decodeRecentBatchesPart(&r)
        registry.nextOffset = try r.u64()
        for _ in 0..<(try r.u32()) {
            let key = PushKey(provider: try r.string(), token: try r.string())
            let publicKey = try r.byteString()
            let authSecret = try r.byteString()
            guard registry.pushTokens[key] != nil else {
                throw DecodeError.invalid("Web Push keys for a push token the snapshot does not hold")
            }
            registry.pushTokens[key]?.webPushPublicKey = publicKey
            registry.pushTokens[key]?.webPushAuthSecret = authSecret
        }
        try registry.decodeCommandPart(&r)
        for _ in 0..<(try r.u32()) {
            let id = try r.u64()
            guard registry.users[id] != nil else {
                throw DecodeError.invalid("a setting for user \(id), whom the snapshot does not hold")
            }
            registry.users[id]?.owntracksFriends = true
        }
        try registry.decodePresencePart(&r)
        try registry.decodeGeofencePart(&r)
        try registry.decodeGeofenceNotificationPart(&r)
        try registry.decodeImportedBatchesPart(&r)
        try registry.decodeNtfyTopicsPart(&r)
        try registry.decodeFoundNoticePart(&r)
        return registry
    }

    /// The retention settings and policy, first in the body.
    private func encodeRetentionPart(_ w: inout ByteWriter) {
        w.u64(UInt64(retention.settings.retentionDays))
        w.u64(UInt64(retention.settings.arrivalsRetentionDays))
        w.u32(UInt32(retention.userOfDevice.count))
        for (device, user) in retention.userOfDevice {
            w.u64(device)
            w.u64(user)
        }
        for days in [retention.deviceDays, retention.userDays] {
            w.u32(UInt32(days.count))
            for (id, value) in days {
                w.u64(id)
                w.u64(UInt64(value))
            }
        }
        w.u32(UInt32(retention.erasures.count))
        for (device, list) in retention.erasures {
            w.u64(device)
            w.u32(UInt32(list.count))
            for (offset, erase) in list {
                w.u64(offset)
                w.optionalI64(erase.fromMicros)
                w.optionalI64(erase.toMicros)
            }
        }
        w.u32(UInt32(retention.removedAt.count))
        for (device, offset) in retention.removedAt {
            w.u64(device)
            w.u64(offset)
        }
    }

    /// Users, devices, push tokens and shares.
    private func encodeAccountsPart(_ w: inout ByteWriter) {
        w.u32(UInt32(users.count))
        for user in users.values {
            w.u64(user.id)
            w.string(user.name)
            w.u8(user.role.rawValue)
            w.optionalU32(user.retentionDays)
            w.u8(user.passwordHash == nil ? 0 : 1)
            if let hash = user.passwordHash { w.string(hash) }
        }
        w.u32(UInt32(devices.count))
        for device in devices.values {
            w.u64(device.id)
            w.u64(device.userID)
            w.uuid(device.uuid)
            w.string(device.name)
            w.string(device.platform)
            w.string(device.model)
            w.u8((device.paused ? 1 : 0) | (device.removed ? 2 : 0))
            w.u8(device.tokenHash == nil ? 0 : 1)
            if let hash = device.tokenHash { w.byteString(hash) }
            w.optionalU32(device.retentionDays)
        }
        w.u32(UInt32(pushTokens.count))
        for (key, registration) in pushTokens {
            w.string(key.provider)
            w.string(key.token)
            w.u64(registration.deviceID)
            w.string(registration.topic)
            w.string(registration.environment)
        }
        w.u32(UInt32(shares.count))
        for (device, grantees) in shares {
            w.u64(device)
            w.u32(UInt32(grantees.count))
            for share in grantees.values {
                w.u64(share.granteeUserID)
                w.optionalI64(share.untilMicros)
            }
        }
    }

    /// The derived indexes, stored as they are: names, device keys, devices by user, principals
    /// and token hashes.
    private func encodeIndexesPart(_ w: inout ByteWriter) {
        w.u32(UInt32(userIDsByName.count))
        for (name, id) in userIDsByName {
            w.string(name)
            w.u64(id)
        }
        w.u32(UInt32(deviceIDsByKey.count))
        for (key, id) in deviceIDsByKey {
            w.u64(key.userID)
            w.uuid(key.uuid)
            w.u64(id)
        }
        w.u32(UInt32(deviceIDsByUser.count))
        for (user, ids) in deviceIDsByUser {
            w.u64(user)
            w.u32(UInt32(ids.count))
            for id in ids { w.u64(id) }
        }
        w.u32(UInt32(principals.count))
        for (hash, principal) in principals {
            w.byteString(hash)
            switch principal {
            case .user(let id):
                w.u8(0)
                w.u64(id)
            case .device(let id):
                w.u8(1)
                w.u64(id)
            }
        }
        w.u32(UInt32(userTokenHashes.count))
        for (user, hashes) in userTokenHashes {
            w.u64(user)
            w.u32(UInt32(hashes.count))
            for hash in hashes { w.byteString(hash) }
        }
    }

    /// The rings of recent batch results per device.
    private func encodeRecentBatchesPart(_ w: inout ByteWriter) {
        w.u32(UInt32(recentBatches.count))
        for (device, ring) in recentBatches {
            w.u64(device)
            w.u32(UInt32(ring.head))
            w.u32(UInt32(ring.order.count))
            for id in ring.order { w.uuid(id) }
            w.u32(UInt32(ring.results.count))
            for (id, result) in ring.results {
                w.uuid(id)
                w.u64(result.offset)
                w.u64(UInt64(result.accepted))
                w.u32(UInt32(result.rejections.count))
                for rejection in result.rejections {
                    w.u32(rejection.index)
                    w.string(rejection.reason)
                }
            }
        }
    }

    /// Users, devices, push tokens and shares, as `encodeAccountsPart` wrote them.
    private mutating func decodeAccountsPart(_ r: inout ByteReader) throws {
        for _ in 0..<(try r.u32()) {
            let id = try r.u64()
            let name = try r.string()
            guard let role = Role(rawValue: try r.u8()) else { throw DecodeError.invalid("unknown role") }
            var user = User(id: id, name: name, role: role, retentionDays: try r.optionalU32())
            user.passwordHash = try r.u8() == 0 ? nil : try r.string()
            users[id] = user
        }
        for _ in 0..<(try r.u32()) {
            var device = Device(
                id: try r.u64(), userID: try r.u64(), uuid: try r.uuid(), name: try r.string(),
                platform: try r.string(), model: try r.string())
            let flags = try r.u8()
            device.paused = flags & 1 != 0
            device.removed = flags & 2 != 0
            device.tokenHash = try r.u8() == 0 ? nil : try r.byteString()
            device.retentionDays = try r.optionalU32()
            devices[device.id] = device
        }
        for _ in 0..<(try r.u32()) {
            let key = PushKey(provider: try r.string(), token: try r.string())
            pushTokens[key] = PushRegistration(
                deviceID: try r.u64(), topic: try r.string(), environment: try r.string())
        }
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            var grantees: [UInt64: Share] = [:]
            for _ in 0..<(try r.u32()) {
                let grantee = try r.u64()
                grantees[grantee] = Share(granteeUserID: grantee, untilMicros: try r.optionalI64())
            }
            shares[device] = grantees
        }
    }

    /// The derived indexes, as `encodeIndexesPart` wrote them.
    private mutating func decodeIndexesPart(_ r: inout ByteReader) throws {
        for _ in 0..<(try r.u32()) { userIDsByName[try r.string()] = try r.u64() }
        for _ in 0..<(try r.u32()) {
            deviceIDsByKey[DeviceKey(userID: try r.u64(), uuid: try r.uuid())] = try r.u64()
        }
        for _ in 0..<(try r.u32()) {
            let user = try r.u64()
            var ids: [UInt64] = []
            for _ in 0..<(try r.u32()) { ids.append(try r.u64()) }
            deviceIDsByUser[user] = ids
        }
        for _ in 0..<(try r.u32()) {
            let hash = try r.byteString()
            switch try r.u8() {
            case 0: principals[hash] = .user(try r.u64())
            case 1: principals[hash] = .device(try r.u64())
            default: throw DecodeError.invalid("unknown principal kind")
            }
        }
        for _ in 0..<(try r.u32()) {
            let user = try r.u64()
            var hashes: [[UInt8]] = []
            for _ in 0..<(try r.u32()) { hashes.append(try r.byteString()) }
            userTokenHashes[user] = hashes
        }
    }

    /// The recent batch rings, checked to be what `RecentBatches.insert` relies on.
    private mutating func decodeRecentBatchesPart(_ r: inout ByteReader) throws {
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            var ring = RecentBatches()
            ring.head = Int(try r.u32())
            for _ in 0..<(try r.u32()) { ring.order.append(try r.uuid()) }
            for _ in 0..<(try r.u32()) {
                let id = try r.uuid()
                let offset = try r.u64()
                let accepted = try r.int()
                var rejections: [Rejection] = []
                for _ in 0..<(try r.u32()) {
                    rejections.append(Rejection(index: try r.u32(), reason: try r.string()))
                }
                ring.results[id] = BatchResult(offset: offset, accepted: accepted, rejections: rejections)
            }
            // What `RecentBatches.insert` relies on: the order names exactly the stored results,
            // within capacity, and the head points into a full ring.
            guard ring.order.count <= recentBatchesPerDeviceMax, ring.order.count == ring.results.count,
                ring.order.allSatisfy({ ring.results[$0] != nil }),
                ring.head == 0 || ring.head < ring.order.count
            else { throw DecodeError.invalid("a recent batch ring of device \(device) is inconsistent") }
            recentBatches[device] = ring
        }
    }

    /// The policy's folds are replayed with the events that make them, in the order they were made:
    /// the policy's own `apply` stays the one code path that fills it.
    static func decodePolicy(_ r: inout ByteReader, settings: RetentionSettings) throws -> RetentionPolicy {
        var policy = RetentionPolicy(settings: settings)
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            let user = try r.u64()
            policy.apply(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: device, userID: user, deviceUUID: .zero, name: "", platform: "", model: "")),
                offset: 0)
        }
        for scope in [RetentionScope.device, RetentionScope.user] {
            for _ in 0..<(try r.u32()) {
                let id = try r.u64()
                let days = try r.u64()
                guard days <= UInt64(RetentionPolicy.windowDaysMax) else {
                    throw DecodeError.invalid("a retention window over the maximum")
                }
                policy.apply(
                    .retentionChanged(RetentionChanged(scope: scope(id), days: UInt32(days))), offset: 0)
            }
        }
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            for _ in 0..<(try r.u32()) {
                let offset = try r.u64()
                let erase = HistoryErased(
                    deviceID: device, fromMicros: try r.optionalI64(), toMicros: try r.optionalI64())
                policy.apply(.historyErased(erase), offset: offset)
            }
        }
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            policy.apply(.deviceRemoved(DeviceRemoved(deviceID: device)), offset: try r.u64())
        }
        return policy
    }
}

extension ByteWriter {
    mutating func uuid(_ value: UUID128) {
        u64(value.high)
        u64(value.low)
    }

    fileprivate mutating func byteString(_ bytes: [UInt8]) {
        precondition(bytes.count <= Int(UInt16.max))
        u16(UInt16(bytes.count))
        raw(bytes)
    }

    fileprivate mutating func optionalU32(_ value: UInt32?) {
        u8(value == nil ? 0 : 1)
        if let value { u32(value) }
    }

    fileprivate mutating func optionalI64(_ value: Int64?) {
        u8(value == nil ? 0 : 1)
        if let value { i64(value) }
    }
}

extension ByteReader {
    mutating func uuid() throws -> UUID128 { UUID128(high: try u64(), low: try u64()) }

    fileprivate mutating func byteString() throws -> [UInt8] { Array(try raw(Int(try u16()))) }

    fileprivate mutating func int() throws -> Int {
        let value = try u64()
        guard value <= UInt64(Int.max) else { throw DecodeError.invalid("a count over Int.max") }
        return Int(value)
    }

    fileprivate mutating func optionalU32() throws -> UInt32? { try u8() == 0 ? nil : try u32() }

    fileprivate mutating func optionalI64() throws -> Int64? { try u8() == 0 ? nil : try i64() }
}

// Version 3 of the body appends: the shares that permit locating (device, grantee), then
// the command book: open commands (command id, device, kind u8, message, phone, requested by,
// requested at, since version 10 the offset of its command_requested, sent channels), each device's open ids in order, and the last request time per
// (device, kind).
extension Registry {
    fileprivate func encodeCommandPart(_ w: inout ByteWriter) {
        let locating = shares.flatMap { device, grantees in
            grantees.values.filter(\.mayLocate).map { (device, $0.granteeUserID) }
        }
        w.u32(UInt32(locating.count))
        for (device, grantee) in locating {
            w.u64(device)
            w.u64(grantee)
        }
        w.u32(UInt32(commands.open.count))
        for (id, command) in commands.open {
            w.uuid(id)
            let request = command.request
            w.u64(request.deviceID)
            w.u8(request.kind.rawValue)
            w.string(request.message)
            w.string(request.phone)
            w.u64(request.requestedByUserID)
            w.i64(request.requestedAtMicros)
            w.u64(command.requestOffset)
            w.u32(UInt32(command.sentChannels.count))
            for channel in command.sentChannels { w.string(channel) }
        }
        w.u32(UInt32(commands.openByDevice.count))
        for (device, ids) in commands.openByDevice {
            w.u64(device)
            w.u32(UInt32(ids.count))
            for id in ids { w.uuid(id) }
        }
        w.u32(UInt32(commands.lastRequested.count))
        for (key, micros) in commands.lastRequested {
            w.u64(key.deviceID)
            w.u8(key.kind.rawValue)
            w.i64(micros)
        }
    }

    fileprivate mutating func decodeCommandPart(_ r: inout ByteReader) throws {
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            let grantee = try r.u64()
            guard shares[device]?[grantee] != nil else {
                throw DecodeError.invalid("a locate permission names no share (device \(device))")
            }
            shares[device]![grantee]!.mayLocate = true
        }
        func kind() throws -> CommandKindCode {
            let number = try r.u8()
            guard let kind = CommandKindCode(rawValue: number) else {
                throw DecodeError.invalid("command kind \(number) is not 0-3")
            }
            return kind
        }
        for _ in 0..<(try r.u32()) {
            let id = try r.uuid()
            let request = CommandRequested(
                commandID: id, deviceID: try r.u64(), kind: try kind(), message: try r.string(),
                phone: try r.string(), requestedByUserID: try r.u64(), requestedAtMicros: try r.i64())
            let offset = try r.u64()
            guard offset < nextOffset else {
                throw DecodeError.invalid(
                    "command \(id) was requested at offset \(offset), past the fold's end")
            }
            var channels: [String] = []
            for _ in 0..<(try r.u32()) { channels.append(try r.string()) }
            commands.open[id] = CommandBook.Open(
                request: request, requestOffset: offset, sentChannels: channels)
        }
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            var ids: [UUID128] = []
            for _ in 0..<(try r.u32()) { ids.append(try r.uuid()) }
            guard ids.allSatisfy({ commands.open[$0]?.request.deviceID == device }) else {
                throw DecodeError.invalid("the open commands of device \(device) are inconsistent")
            }
            commands.openByDevice[device] = ids
        }
        for _ in 0..<(try r.u32()) {
            commands.lastRequested[CommandBook.KindKey(deviceID: try r.u64(), kind: try kind())] = try r.i64()
        }
    }
}

// Version 5 of the body appends: presence links, then presence states.
extension Registry {
    fileprivate func encodePresencePart(_ w: inout ByteWriter) {
        w.u32(UInt32(presence.links.count))
        for (device, link) in presence.links {
            w.u64(device)
            w.string(link.nodeID)
            w.string(link.nodeName)
        }
        w.u32(UInt32(presence.states.count))
        for (device, state) in presence.states {
            w.u64(device)
            w.u8(state.online ? 1 : 0)
            w.optionalI64(state.lastSeenMicros)
            w.i64(state.changedAtMicros)
        }
    }

    fileprivate mutating func decodePresencePart(_ r: inout ByteReader) throws {
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            presence.links[device] = PresenceBook.Link(nodeID: try r.string(), nodeName: try r.string())
        }
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            let online = try r.u8()
            guard online <= 1, presence.links[device] != nil else {
                throw DecodeError.invalid("a presence state of device \(device) is inconsistent")
            }
            presence.states[device] = PresenceBook.State(
                online: online == 1, lastSeenMicros: try r.optionalI64(), changedAtMicros: try r.i64())
        }
    }
}
