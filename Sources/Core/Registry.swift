import Events

/// Everything the server must know to answer a request without a database: users, devices, token
/// hashes, push tokens, pause switches and the recent batch results of each device.
///
/// It is a pure value folded from the log: `apply(_:offset:)` is the one code path, used both
/// while replaying the log at start and after each append the server makes, so the registry a
/// restarted server rebuilds is the one it had. Callers serialise access (see `RegistryStore`).
public struct Registry: Sendable {
    /// The retention overrides, folded by the compactor's own rule (`RetentionPolicy`), so that the
    /// arrival check and the compactor agree on every device's window. Its default window is set
    /// by the caller (`IngestLimits.retentionDays`).
    public internal(set) var retention = RetentionPolicy(settings: RetentionSettings())
    public struct User: Equatable, Sendable {
        public var id: UInt64
        public var name: String
        public var role: Role
        /// The user's retention override (days), nil for the server's default.
        public var retentionDays: UInt32?
        /// The Argon2id string of the login password; nil until `findmy user passwd` sets one.
        public var passwordHash: String?
        /// OwnTracks' answers carry the devices shared with this user (docs/clients.md, "Friends").
        public var owntracksFriends = false
        /// Where the user hears that a device was found (FoundNotices.swift): an ntfy topic URL
        /// and a webhook URL, "" for none.
        public var notifyNtfyURL = ""
        public var notifyWebhookURL = ""
    }

    /// A share of one device with one user: it works while `untilMicros` is nil or in the future.
    public struct Share: Equatable, Sendable {
        public var granteeUserID: UInt64
        public var untilMicros: Int64?
        /// The grantee may also send commands (locate, sound, lost); false: "see only", the default.
        public var mayLocate = false

        /// Whether the share works at `nowMicros`: an expired share stops by itself, with no event.
        public func isActive(atMicros nowMicros: Int64) -> Bool {
            untilMicros.map { nowMicros < $0 } ?? true
        }
    }

    /// A device a reader may see, and the owner who shared it (nil for the reader's own).
    public struct VisibleDevice: Equatable, Sendable {
        public var deviceID: UInt64
        public var sharedByUserID: UInt64?
        public init(deviceID: UInt64, sharedByUserID: UInt64?) {
            self.deviceID = deviceID
            self.sharedByUserID = sharedByUserID
        }
    }

    public struct Device: Equatable, Sendable {
        public var id: UInt64
        public var userID: UInt64
        public var uuid: UUID128
        public var name: String
        public var platform: String
        public var model: String
        public var paused = false
        /// The one token that works for this device; issuing a new one revokes it.
        public var tokenHash: [UInt8]?
        /// The device's retention override (days), nil for its user's window.
        public var retentionDays: UInt32?
        /// Removed by its owner: kept only so that its id is never given to another device.
        public var removed = false
    }

    /// Who a bearer token belongs to.
    public enum Principal: Equatable, Sendable {
        case user(UInt64)
        case device(UInt64)
    }

    public struct PushKey: Hashable, Sendable {
        public var provider: String
        public var token: String
        public init(provider: String, token: String) {
            self.provider = provider
            self.token = token
        }
    }

    public struct PushRegistration: Equatable, Sendable {
        public var deviceID: UInt64
        public var topic: String
        public var environment: String
        /// UnifiedPush / Web Push: the device's P-256 public key and auth secret (RFC 8291); empty
        /// for other providers.
        public var webPushPublicKey: [UInt8] = []
        public var webPushAuthSecret: [UInt8] = []
    }

    /// What a batch got when it was first stored; a retry is answered with it.
    public struct BatchResult: Equatable, Sendable {
        public var offset: UInt64
        public var accepted: Int
        public var rejections: [Rejection]

        package init(offset: UInt64, accepted: Int, rejections: [Rejection]) {
            self.offset = offset
            self.accepted = accepted
            self.rejections = rejections
        }
    }

    struct DeviceKey: Hashable {
        var userID: UInt64
        var uuid: UUID128
    }

    /// The last `capacity` batch results of one device, oldest evicted first.
    struct RecentBatches {
        var results: [UUID128: BatchResult] = [:]
        var order: [UUID128] = []
        var head = 0

        mutating func insert(_ id: UUID128, _ result: BatchResult, capacity: Int) {
            if results.updateValue(result, forKey: id) != nil { return }
            if order.count < capacity {
                order.append(id)
            } else {
                results[order[head]] = nil
                order[head] = id
                head = (head + 1) % capacity
            }
        }
    }

    public let recentBatchesPerDeviceMax: Int
    public internal(set) var users: [UInt64: User] = [:]
    public internal(set) var devices: [UInt64: Device] = [:]
    public internal(set) var pushTokens: [PushKey: PushRegistration] = [:]
    /// Shares by device, then by grantee. Revoked shares are removed; expired ones stay until
    /// revoked or granted again, and `isActive` tells them apart.
    public internal(set) var shares: [UInt64: [UInt64: Share]] = [:]
    var userIDsByName: [String: UInt64] = [:]
    var deviceIDsByKey: [DeviceKey: UInt64] = [:]
    /// Each user's device ids, ascending, removed ones included: the read API's devices list asks
    /// for them on every request, which a scan of every device of every user made slow.
    var deviceIDsByUser: [UInt64: [UInt64]] = [:]
    var principals: [[UInt8]: Principal] = [:]
    /// Each user's live token hashes, so that a rotation can end every earlier one at once.
    var userTokenHashes: [UInt64: [[UInt8]]] = [:]
    var recentBatches: [UInt64: RecentBatches] = [:]
    /// Every fix batch of an import (protocol `import:<format>`), by device then batch id, never
    /// evicted while the device lives: a re-import of a file of more chunks than the ring holds
    /// stores nothing twice (ImportedBatches.swift).
    var importedBatches: [UInt64: [UUID128: ImportedBatch]] = [:]
    /// Open commands and the last request time per device and kind.
    public internal(set) var commands = CommandBook()
    /// The recent command changes the command streams follow (not in the snapshot).
    public internal(set) var commandFeed = CommandFeed()
    /// Devices linked to tailnet nodes and their last recorded presence.
    public internal(set) var presence = PresenceBook()
    /// The geofences defined on the server, by id (GeofenceBook.swift).
    public internal(set) var geofences = GeofenceBook()
    /// Where each geofence's transitions are announced, by fence id (FenceNotifySettings.swift).
    public internal(set) var geofenceNotifications: [UInt64: GeofenceNotificationsSet] = [:]
    /// The ntfy topic URL of each device that has one, by device id (DeviceNtfyTopics.swift).
    var ntfyTopics: [UInt64: String] = [:]
    /// The armed "notify when found" notices, by device (FoundNotices.swift).
    public internal(set) var foundNotices: [UInt64: FoundNotice] = [:]
    /// The offset after the last event applied.
    public internal(set) var nextOffset: UInt64 = 0

    public init(recentBatchesPerDeviceMax: Int) {
        precondition(recentBatchesPerDeviceMax > 0)
        self.recentBatchesPerDeviceMax = recentBatchesPerDeviceMax
    }

    // MARK: queries

    public func principal(tokenHash: [UInt8]) -> Principal? { principals[tokenHash] }
    public func user(named name: String) -> User? { userIDsByName[name].flatMap { users[$0] } }
    public func device(userID: UInt64, uuid: UUID128) -> Device? {
        deviceIDsByKey[DeviceKey(userID: userID, uuid: uuid)].flatMap { devices[$0] }
    }
    /// The device of `userID` with `uuid` that its owner removed last, when no live device has
    /// that UUID now: what a topic (OwnTracks MQTT) derives the UUID of, so that a removed topic
    /// device is not enrolled again by its next message. Scans the user's devices: it runs only
    /// for messages of removed devices.
    public func removedDevice(userID: UInt64, uuid: UUID128) -> Device? {
        guard device(userID: userID, uuid: uuid) == nil else { return nil }
        for id in (deviceIDsByUser[userID] ?? []).reversed() {
            if let candidate = devices[id], candidate.removed, candidate.uuid == uuid { return candidate }
        }
        return nil
    }

    /// A device that exists and was not removed.
    public func liveDevice(_ id: UInt64) -> Device? {
        devices[id].flatMap { $0.removed ? nil : $0 }
    }
    /// What the batch got when it was stored: from the ring of recent results, else, for a batch
    /// of an import, from `importedBatches` (its offset and accepted count; no rejections).
    public func batchResult(deviceID: UInt64, batchID: UUID128) -> BatchResult? {
        recentBatches[deviceID]?.results[batchID] ?? importedBatchResult(deviceID: deviceID, batchID: batchID)
    }
    /// The device's push registrations (one per provider), ordered by provider then token.
    public func pushRegistrations(deviceID: UInt64) -> [(key: PushKey, registration: PushRegistration)] {
        pushTokens.filter { $0.value.deviceID == deviceID }.map { (key: $0.key, registration: $0.value) }
            .sorted { ($0.key.provider, $0.key.token) < ($1.key.provider, $1.key.token) }
    }
    public func pushTokens(deviceID: UInt64) -> [PushKey] {
        pushTokens.filter { $0.value.deviceID == deviceID }.map(\.key).sorted {
            ($0.provider, $0.token) < ($1.provider, $1.token)
        }
    }

    /// THE rule of who sees whom (DESIGN.md, "Privacy"): a reader sees its own devices and the
    /// devices whose owner shared them with it, while the share is active. Nothing else, whatever
    /// the reader's role: an administrator is no exception.
    public func visibility(of deviceID: UInt64, to reader: UInt64, atMicros nowMicros: Int64)
        -> VisibleDevice?
    {
        guard let device = liveDevice(deviceID) else { return nil }
        if device.userID == reader { return VisibleDevice(deviceID: deviceID, sharedByUserID: nil) }
        guard let share = shares[deviceID]?[reader], share.isActive(atMicros: nowMicros) else { return nil }
        return VisibleDevice(deviceID: deviceID, sharedByUserID: device.userID)
    }

    /// `visibility(of:to:atMicros:)` over a span: whether `reader` may see `deviceID` both at
    /// `sinceMicros` (when something derived from it happened: a fix arrived) and at `nowMicros`,
    /// so that what the device did after a share ended reaches nobody it was shared with, also when
    /// it is derived later (a replay, a retry). A share keeps no start time, so a share revoked and
    /// granted again covers the gap between (docs/privacy.md, "When a share ends").
    public func visibility(
        of deviceID: UInt64, to reader: UInt64, atMicros nowMicros: Int64, sinceMicros: Int64
    ) -> VisibleDevice? {
        guard let visible = visibility(of: deviceID, to: reader, atMicros: nowMicros),
            visibility(of: deviceID, to: reader, atMicros: sinceMicros) != nil
        else { return nil }
        return visible
    }

    /// Whether `user` may send commands to `deviceID` at `nowMicros`: its owner, or a user it is
    /// shared with, while the share is active, with the locate permission. An administrator is no
    /// exception here either (docs/commands.md, "Who may").
    public func mayCommand(_ deviceID: UInt64, user: UInt64, atMicros nowMicros: Int64) -> Bool {
        guard let device = liveDevice(deviceID) else { return false }
        if device.userID == user { return true }
        guard let share = shares[deviceID]?[user], share.isActive(atMicros: nowMicros) else { return false }
        return share.mayLocate
    }

    /// Every device `reader` may see at `nowMicros`, by id (see `visibility`).
    public func visibleDevices(to reader: UInt64, atMicros nowMicros: Int64) -> [VisibleDevice] {
        var visible: [VisibleDevice] = []
        for id in deviceIDsByUser[reader] ?? [] where devices[id]?.removed == false {
            visible.append(VisibleDevice(deviceID: id, sharedByUserID: nil))
        }
        let own = visible.count
        for (deviceID, grantees) in shares {
            guard let share = grantees[reader], share.isActive(atMicros: nowMicros),
                let owner = liveDevice(deviceID)?.userID, owner != reader
            else { continue }
            visible.append(VisibleDevice(deviceID: deviceID, sharedByUserID: owner))
        }
        // The own devices are in order already; only shared ones make a sort necessary.
        if visible.count > own { visible.sort { $0.deviceID < $1.deviceID } }
        return visible
    }

    public var nextUserID: UInt64 { (users.keys.max() ?? 0) + 1 }
    public var nextDeviceID: UInt64 { (devices.keys.max() ?? 0) + 1 }

    // MARK: the fold

    /// Folds one event in. Events about unknown users or devices are kept out rather than trusted:
    /// the log is written by this server, so they only appear if a later tool rewrote it.
    /// `receivedAtMicros`: the record's, which the server's fold paths pass (only the time a
    /// found notice was armed keeps it).
    public mutating func apply(_ event: Event, offset: UInt64, receivedAtMicros: Int64? = nil) {
        nextOffset = max(nextOffset, offset + 1)
        retention.apply(event, offset: offset)
        commandFeed.note(event, offset: offset, book: commands)
        commands.apply(event, offset: offset)
        presence.apply(event)
        geofences.apply(event)
        applyGeofenceNotifications(event)
        applyDeviceNtfy(event)
        applyFoundNotice(event, offset: offset, receivedAtMicros: receivedAtMicros)
        switch event {
        case .fixBatch(let batch):
            let result = BatchResult(
                offset: offset, accepted: batch.fixes.count, rejections: batch.rejections)
            recentBatches[batch.deviceID, default: RecentBatches()].insert(
                batch.batchID, result, capacity: recentBatchesPerDeviceMax)
            rememberIfImported(
                deviceID: batch.deviceID, batchID: batch.batchID, batch.clientProtocol, offset: offset,
                accepted: batch.fixes.count)
        case .userCreated, .userTokenIssued, .userTokenRotated, .userPasswordSet, .userRoleChanged,
            .userSettingChanged:
            applyUserEvent(event)
        case .deviceEnrolled, .deviceTokenIssued, .deviceTokenRevoked, .reportingChanged, .deviceRemoved:
            applyDeviceEvent(event)
        case .pushTokenRegistered, .pushTokenInvalidated:
            applyPushEvent(event)
        case .shareGranted, .shareRevoked, .sharePermissionChanged:
            applySharingEvent(event)
        case .retentionChanged(let change):
            switch change.scope {
            case .device(let id): devices[id]?.retentionDays = change.days
            case .user(let id): users[id]?.retentionDays = change.days
            }
        case .historyErased:
            break  // history is the projection's and the compactor's; nothing ingest answers changes
        case .regionTransition, .waypointsReported, .unknown:
            break
        case .historyImported:
            break  // an import's audit record: its batches are folded as fix batches
        case .deviceNtfySet:
            break  // folded by `applyDeviceNtfy` above
        case .devicePresenceLinked, .presenceChanged:
            break  // folded by `presence` above
        case .geofenceDefined, .geofenceDeleted, .geofenceNotificationsSet:
            break  // folded by `geofences` and `applyGeofenceNotifications` above
        case .foundNoticeSet:
            break  // folded by `applyFoundNotice` above
        case .commandRequested, .commandSent, .commandDeliveryFailed, .commandAnswered, .commandExpired:
            break  // folded by `commands` above
        }
    }

    /// Users, their tokens, passwords, roles and settings.
    private mutating func applyUserEvent(_ event: Event) {
        switch event {
        case .userCreated(let created):
            users[created.userID] = User(id: created.userID, name: created.name, role: created.role)
            userIDsByName[created.name] = created.userID
            principals[created.tokenHash] = .user(created.userID)
            userTokenHashes[created.userID, default: []].append(created.tokenHash)
        case .userTokenIssued(let issued):
            guard users[issued.userID] != nil else { return }
            principals[issued.tokenHash] = .user(issued.userID)
            userTokenHashes[issued.userID, default: []].append(issued.tokenHash)
        case .userTokenRotated(let rotated):
            guard users[rotated.userID] != nil else { return }
            for old in userTokenHashes[rotated.userID] ?? [] where principals[old] == .user(rotated.userID) {
                principals[old] = nil
            }
            principals[rotated.tokenHash] = .user(rotated.userID)
            userTokenHashes[rotated.userID] = [rotated.tokenHash]
        case .userPasswordSet(let set):
            users[set.userID]?.passwordHash = set.passwordHash
        case .userRoleChanged(let changed):
            users[changed.userID]?.role = changed.role
        case .userSettingChanged(let changed):
            // A name this findmy does not know is a newer findmy's setting: ignored.
            switch changed.name {
            case UserSettingChanged.owntracksFriends:
                users[changed.userID]?.owntracksFriends = changed.value == "true"
            case UserSettingChanged.notifyNtfyURL:
                users[changed.userID]?.notifyNtfyURL = changed.value
            case UserSettingChanged.notifyWebhookURL:
                users[changed.userID]?.notifyWebhookURL = changed.value
            default:
                break
            }
        default:
            break
        }
    }

    /// Devices: enrolment, their tokens, pausing and removal.
    private mutating func applyDeviceEvent(_ event: Event) {
        switch event {
        case .deviceEnrolled(let enrolled):
            guard devices[enrolled.deviceID]?.removed != true else { return }
            if devices[enrolled.deviceID] == nil {
                // Ids come in ascending order from the server; insert in place all the same.
                var ids = deviceIDsByUser[enrolled.userID, default: []]
                let position = ids.lastIndex(where: { $0 < enrolled.deviceID }).map { $0 + 1 } ?? 0
                ids.insert(enrolled.deviceID, at: position)
                deviceIDsByUser[enrolled.userID] = ids
            }
            var device =
                devices[enrolled.deviceID]
                ?? Device(
                    id: enrolled.deviceID, userID: enrolled.userID, uuid: enrolled.deviceUUID, name: "",
                    platform: "",
                    model: "")
            device.name = enrolled.name
            device.platform = enrolled.platform
            device.model = enrolled.model
            devices[enrolled.deviceID] = device
            deviceIDsByKey[DeviceKey(userID: device.userID, uuid: device.uuid)] = device.id
        case .deviceTokenIssued(let issued):
            guard var device = devices[issued.deviceID] else { return }
            if let old = device.tokenHash { principals[old] = nil }
            device.tokenHash = issued.tokenHash
            devices[device.id] = device
            principals[issued.tokenHash] = .device(device.id)
        case .deviceTokenRevoked(let revoked):
            guard var device = devices[revoked.deviceID], device.tokenHash == revoked.tokenHash else {
                return
            }
            principals[revoked.tokenHash] = nil
            device.tokenHash = nil
            devices[device.id] = device
        case .reportingChanged(let changed):
            devices[changed.deviceID]?.paused = changed.paused
        case .deviceRemoved(let removed):
            guard var device = devices[removed.deviceID] else { return }
            if let token = device.tokenHash { principals[token] = nil }
            device.tokenHash = nil
            device.removed = true
            devices[device.id] = device
            deviceIDsByKey[DeviceKey(userID: device.userID, uuid: device.uuid)] = nil
            for (key, registration) in pushTokens where registration.deviceID == device.id {
                pushTokens[key] = nil
            }
            recentBatches[device.id] = nil
            importedBatches[device.id] = nil
        default:
            break
        }
    }

    /// Push tokens, keyed by token.
    private mutating func applyPushEvent(_ event: Event) {
        switch event {
        case .pushTokenRegistered(let registered):
            guard devices[registered.deviceID] != nil else { return }
            // A rotated token replaces the device's previous token of the same provider.
            for (key, registration) in pushTokens
            where registration.deviceID == registered.deviceID && key.provider == registered.provider {
                pushTokens[key] = nil
            }
            // Token-keyed: a token seen on another device moves here.
            pushTokens[PushKey(provider: registered.provider, token: registered.token)] = PushRegistration(
                deviceID: registered.deviceID, topic: registered.topic, environment: registered.environment,
                webPushPublicKey: registered.webPushPublicKey, webPushAuthSecret: registered.webPushAuthSecret
            )
        case .pushTokenInvalidated(let invalidated):
            pushTokens[PushKey(provider: invalidated.provider, token: invalidated.token)] = nil
        default:
            break
        }
    }

    /// Shares of a device with another user.
    private mutating func applySharingEvent(_ event: Event) {
        switch event {
        case .shareGranted(let granted):
            guard devices[granted.deviceID] != nil, users[granted.granteeUserID] != nil else { return }
            // Granting again changes the until and keeps the permission (SharePermissionChanged).
            let mayLocate = shares[granted.deviceID]?[granted.granteeUserID]?.mayLocate ?? false
            shares[granted.deviceID, default: [:]][granted.granteeUserID] = Share(
                granteeUserID: granted.granteeUserID, untilMicros: granted.untilMicros, mayLocate: mayLocate)
        case .shareRevoked(let revoked):
            shares[revoked.deviceID]?[revoked.granteeUserID] = nil
            if shares[revoked.deviceID]?.isEmpty == true { shares[revoked.deviceID] = nil }
        case .sharePermissionChanged(let changed):
            shares[changed.deviceID]?[changed.granteeUserID]?.mayLocate = changed.locate
        default:
            break
        }
    }

    /// A record whose payload the compactor removed (an expired batch whose envelope is kept): a
    /// retry of its batch id is still answered with what it got, as far as the header tells.
    public mutating func applyEnvelope(_ header: RecordHeader) {
        applyEnvelope(header, rejections: [])
    }

    /// A fix batch as its header and rejections tell it: all the registry keeps of one.
    private mutating func applyEnvelope(_ header: RecordHeader, rejections: [Rejection]) {
        nextOffset = max(nextOffset, header.offset + 1)
        guard header.type == EventType.fixBatch.rawValue else { return }
        let result = BatchResult(
            offset: header.offset, accepted: Int(header.fixCount), rejections: rejections)
        recentBatches[header.deviceKey, default: RecentBatches()].insert(
            header.idempotencyKey, result, capacity: recentBatchesPerDeviceMax)
        // The protocol is in the header's flags, so an envelope still says it was imported.
        rememberIfImported(
            deviceID: header.deviceKey, batchID: header.idempotencyKey, header.clientProtocol,
            offset: header.offset, accepted: Int(header.fixCount))
        fireFoundNotice(
            deviceID: header.deviceKey, acceptedFixes: Int(header.fixCount), offset: header.offset)
    }

    /// Folds one record read from the log, as `apply` folds its event. A fix batch is folded from
    /// its header and rejections without decoding its fixes, which the registry does not keep: the
    /// registry snapshotter folds every record the server appends, and a start-up replay every
    /// record after the snapshot, so decoding fixes only to count them was most of their cost.
    public mutating func apply(_ record: LogRecord) throws {
        if record.header.isPayloadRemoved {
            applyEnvelope(record.header)
        } else if let rejections = try EventCodec.fixBatchRejections(
            header: record.header, stored: record.storedPayload)
        {
            applyEnvelope(record.header, rejections: rejections)
        } else {
            apply(try record.event(), offset: record.offset, receivedAtMicros: record.header.receivedAtMicros)
        }
    }

    /// Rebuilds the registry from every durable record of a log.
    public static func replay(_ reader: LogReader, recentBatchesPerDeviceMax: Int) throws -> Registry {
        var registry = Registry(recentBatchesPerDeviceMax: recentBatchesPerDeviceMax)
        try reader.read(from: 0) { record in
            try registry.apply(record)
            return true
        }
        return registry
    }
}
