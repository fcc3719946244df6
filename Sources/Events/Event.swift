/// The events of the log. Every state change of findmy is one of these, appended as one record.
///
/// Events are versioned per type (`eventVersion` in the record header). An event type or version
/// a reader does not know decodes as `.unknown`, so an old reader skips what a newer writer added.
public enum Event: Equatable, Sendable {
    case fixBatch(FixBatch)
    case userCreated(UserCreated)
    case userTokenIssued(UserTokenIssued)
    case deviceEnrolled(DeviceEnrolled)
    case deviceTokenIssued(DeviceTokenIssued)
    case deviceTokenRevoked(DeviceTokenRevoked)
    case pushTokenRegistered(PushTokenRegistered)
    case pushTokenInvalidated(PushTokenInvalidated)
    case reportingChanged(ReportingChanged)
    case retentionChanged(RetentionChanged)
    case historyErased(HistoryErased)
    case deviceRemoved(DeviceRemoved)
    case userPasswordSet(UserPasswordSet)
    case userRoleChanged(UserRoleChanged)
    case shareGranted(ShareGranted)
    case shareRevoked(ShareRevoked)
    case userTokenRotated(UserTokenRotated)
    case regionTransition(RegionTransition)
    case waypointsReported(WaypointsReported)
    case commandRequested(CommandRequested)
    case commandSent(CommandSent)
    case commandDeliveryFailed(CommandDeliveryFailed)
    case commandAnswered(CommandAnswered)
    case commandExpired(CommandExpired)
    case sharePermissionChanged(SharePermissionChanged)
    case userSettingChanged(UserSettingChanged)
    case devicePresenceLinked(DevicePresenceLinked)
    case presenceChanged(PresenceChanged)
    case geofenceDefined(GeofenceDefined)
    case geofenceDeleted(GeofenceDeleted)
    case geofenceNotificationsSet(GeofenceNotificationsSet)
    case historyImported(HistoryImported)
    case deviceNtfySet(DeviceNtfySet)
    case foundNoticeSet(FoundNoticeSet)
    case unknown(type: UInt8, version: UInt16, payload: [UInt8])
}

/// Record type numbers (docs/log-format.md, "Event types"). Never reuse a number.
public enum EventType: UInt8, Sendable, CaseIterable {
    case fixBatch = 1
    case userCreated = 2
    case userTokenIssued = 3
    case deviceEnrolled = 4
    case deviceTokenIssued = 5
    case deviceTokenRevoked = 6
    case pushTokenRegistered = 7
    case pushTokenInvalidated = 8
    case reportingChanged = 9
    case retentionChanged = 10
    case historyErased = 11
    case deviceRemoved = 12
    // 20 and up: users, roles and sharing. 10-19 are left to the retention events.
    case userPasswordSet = 20
    case userRoleChanged = 21
    case shareGranted = 22
    case shareRevoked = 23
    case userTokenRotated = 24
    // 25 and up: places: what apps report about regions.
    case regionTransition = 25
    case waypointsReported = 26
    // 27 and up: commands to devices and what a share permits (CommandEvents.swift).
    case commandRequested = 27
    case commandSent = 28
    case commandDeliveryFailed = 29
    case commandAnswered = 30
    case commandExpired = 31
    case sharePermissionChanged = 32
    // 33: a user's own settings (SettingEvents.swift).
    case userSettingChanged = 33
    // 34 and 35: presence from the tailnet (PresenceEvents.swift).
    case devicePresenceLinked = 34
    case presenceChanged = 35
    // 36-38: geofences drawn on the server (GeofenceEvents.swift).
    case geofenceDefined = 36
    case geofenceDeleted = 37
    // 39: where a geofence's transitions are announced (GeofenceNotifyEvents.swift).
    case geofenceNotificationsSet = 39
    // 40: a file of location history imported into a device (ImportEvents.swift).
    case historyImported = 40
    // 41: the ntfy topic a device is rung through (DeviceNtfyEvents.swift). 42 is taken by the
    // notification of a found device.
    case deviceNtfySet = 41
    // 42: "notify when found" armed or disarmed on a device (FoundNoticeEvents.swift).
    case foundNoticeSet = 42

    public var name: String {
        switch self {
        case .fixBatch: "fix_batch"
        case .userCreated: "user_created"
        case .userTokenIssued: "user_token_issued"
        case .deviceEnrolled: "device_enrolled"
        case .deviceTokenIssued: "device_token_issued"
        case .deviceTokenRevoked: "device_token_revoked"
        case .pushTokenRegistered: "push_token_registered"
        case .pushTokenInvalidated: "push_token_invalidated"
        case .reportingChanged: "reporting_changed"
        case .retentionChanged: "retention_changed"
        case .historyErased: "history_erased"
        case .deviceRemoved: "device_removed"
        case .userPasswordSet: "user_password_set"
        case .userRoleChanged: "user_role_changed"
        case .shareGranted: "share_granted"
        case .shareRevoked: "share_revoked"
        case .userTokenRotated: "user_token_rotated"
        case .regionTransition: "region_transition"
        case .waypointsReported: "waypoints_reported"
        case .commandRequested: "command_requested"
        case .commandSent: "command_sent"
        case .commandDeliveryFailed: "command_delivery_failed"
        case .commandAnswered: "command_answered"
        case .commandExpired: "command_expired"
        case .sharePermissionChanged: "share_permission_changed"
        case .userSettingChanged: "user_setting_changed"
        case .devicePresenceLinked: "device_presence_linked"
        case .presenceChanged: "presence_changed"
        case .geofenceDefined: "geofence_defined"
        case .geofenceDeleted: "geofence_deleted"
        case .geofenceNotificationsSet: "geofence_notifications_set"
        case .historyImported: "history_imported"
        case .deviceNtfySet: "device_ntfy_set"
        case .foundNoticeSet: "found_notice_set"
        }
    }
}

/// The names of a fix's fields: members of a report and of the read API's fix objects, and columns
/// of the projection's fix tables. The one list; decoders, writers and SQL take names from here.
public enum FixField: String, CaseIterable, Sendable {
    case latitude
    case longitude
    case accuracy = "accuracy_m"
    case altitude = "altitude_m"
    case speed = "speed_mps"
    case heading = "heading_deg"
    case battery = "battery_pct"
    case charging = "is_charging"
    case source
    case recordedAt = "recorded_at"
    /// Set by the server, never sent by a device.
    case receivedAt = "received_at"
    case clockSuspect = "clock_suspect"

    /// The fields a device sends in a report (docs/api.md): every one but the server's own.
    public static let reported: [FixField] = allCases.filter { $0 != .receivedAt && $0 != .clockSuspect }
}

/// One position report. Doubles are kept bit for bit; range checks belong to ingest.
public struct Fix: Equatable, Sendable {
    public var latitude: Double
    public var longitude: Double
    /// nil: accuracy unknown (an app that sends none, or 0). The native report API requires it;
    /// the log stores unknown as 0, a value outside the accepted range (docs/log-format.md).
    public var accuracyMeters: Double?
    public var altitudeMeters: Double?
    public var speedMetersPerSecond: Double?
    public var headingDegrees: Double?
    public var batteryPercent: UInt8?
    public var isCharging: Bool?
    public var source: String
    /// Device clock: when the fix was taken.
    public var recordedAtMicros: Int64
    /// Set by ingest when `recorded_at` is in the future of `received_at` beyond its tolerance.
    public var clockSuspect: Bool

    public init(
        latitude: Double, longitude: Double, accuracyMeters: Double?, altitudeMeters: Double? = nil,
        speedMetersPerSecond: Double? = nil, headingDegrees: Double? = nil, batteryPercent: UInt8? = nil,
        isCharging: Bool? = nil, source: String, recordedAtMicros: Int64, clockSuspect: Bool = false
    ) {
        self.latitude = latitude
        self.longitude = longitude
        self.accuracyMeters = accuracyMeters
        self.altitudeMeters = altitudeMeters
        self.speedMetersPerSecond = speedMetersPerSecond
        self.headingDegrees = headingDegrees
        self.batteryPercent = batteryPercent
        self.isCharging = isCharging
        self.source = source
        self.recordedAtMicros = recordedAtMicros
        self.clockSuspect = clockSuspect
    }

    /// Bitwise equality, so that NaN payloads and signed zeros count as equal only to themselves.
    public static func == (lhs: Fix, rhs: Fix) -> Bool {
        lhs.latitude.bitPattern == rhs.latitude.bitPattern
            && lhs.longitude.bitPattern == rhs.longitude.bitPattern
            && lhs.accuracyMeters?.bitPattern == rhs.accuracyMeters?.bitPattern
            && lhs.altitudeMeters?.bitPattern == rhs.altitudeMeters?.bitPattern
            && lhs.speedMetersPerSecond?.bitPattern == rhs.speedMetersPerSecond?.bitPattern
            && lhs.headingDegrees?.bitPattern == rhs.headingDegrees?.bitPattern
            && lhs.batteryPercent == rhs.batteryPercent && lhs.isCharging == rhs.isCharging
            && lhs.source == rhs.source && lhs.recordedAtMicros == rhs.recordedAtMicros
            && lhs.clockSuspect == rhs.clockSuspect
    }
}

/// One accepted report request: the fixes that passed validation, and why the others did not.
/// The rejections are kept so that a retried batch id is answered with the original result,
/// even after a restart, and so that "what arrived when" includes what was refused.
public struct FixBatch: Equatable, Sendable {
    public var deviceID: UInt64
    public var batchID: UUID128
    public var fixes: [Fix]
    public var rejections: [Rejection]
    /// The wire format the batch arrived in; kept in the record header's flags (docs/log-format.md).
    public var clientProtocol: ClientProtocol

    public init(
        deviceID: UInt64, batchID: UUID128, fixes: [Fix], rejections: [Rejection] = [],
        clientProtocol: ClientProtocol = .native
    ) {
        self.deviceID = deviceID
        self.batchID = batchID
        self.fixes = fixes
        self.rejections = rejections
        self.clientProtocol = clientProtocol
    }
}

/// The wire format a fix batch arrived in: findmy's own report API, an app's protocol, or a file import
/// (5-14, `import:<format>`, ImportEvents.swift). Stored as
/// a 4-bit number in bits 12-15 of the record header's flags; 0 (every record written before this
/// field) is native. A number this version has no name for is kept and shown as `protocol-N`.
public struct ClientProtocol: Hashable, Sendable, Comparable {
    public let rawValue: UInt8

    public init?(rawValue: UInt8) {
        guard rawValue <= Self.rawValueMax else { return nil }
        self.rawValue = rawValue
    }

    private init(known rawValue: UInt8) { self.rawValue = rawValue }

    public static let rawValueMax: UInt8 = 15
    public static let native = ClientProtocol(known: 0)
    public static let owntracksHTTP = ClientProtocol(known: 1)
    public static let owntracksMQTT = ClientProtocol(known: 2)
    public static let overland = ClientProtocol(known: 3)
    public static let osmand = ClientProtocol(known: 4)
    public static let known: [ClientProtocol] =
        [.native, .owntracksHTTP, .owntracksMQTT, .overland, .osmand]
        + importFormatNames.compactMap { imported(format: $0) }

    /// The name the arrivals audit, `/metrics` and the CLI show.
    public var name: String {
        switch rawValue {
        case 0: "native"
        case 1: "owntracks-http"
        case 2: "owntracks-mqtt"
        case 3: "overland"
        case 4: "osmand"
        default: importFormat.map { "import:" + $0 } ?? "protocol-\(rawValue)"
        }
    }

    public init?(name: String) {
        guard let found = Self.known.first(where: { $0.name == name }) else { return nil }
        self = found
    }

    public static func < (lhs: ClientProtocol, rhs: ClientProtocol) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// A fix of a request that was not accepted: its index in the request and the reason.
public struct Rejection: Equatable, Sendable {
    public var index: UInt32
    public var reason: String

    public init(index: UInt32, reason: String) {
        self.index = index
        self.reason = reason
    }
}

public enum Role: UInt8, Sendable, CaseIterable {
    case member = 0
    case admin = 1
}

public struct UserCreated: Equatable, Sendable {
    public var userID: UInt64
    public var name: String
    public var role: Role
    /// SHA-256 of the user's first API token; the token itself is never stored.
    public var tokenHash: [UInt8]

    public init(userID: UInt64, name: String, role: Role, tokenHash: [UInt8]) {
        self.userID = userID
        self.name = name
        self.role = role
        self.tokenHash = tokenHash
    }
}

public struct UserTokenIssued: Equatable, Sendable {
    public var userID: UInt64
    public var tokenHash: [UInt8]

    public init(userID: UInt64, tokenHash: [UInt8]) {
        self.userID = userID
        self.tokenHash = tokenHash
    }
}

/// The user's API token was replaced: `tokenHash` (SHA-256 of the new token, never the token) is
/// from now on the user's only token, and every earlier one (the first, from `UserCreated`, and any
/// from `UserTokenIssued`) stops working. Login sessions are not tokens and are not affected.
public struct UserTokenRotated: Equatable, Sendable {
    public var userID: UInt64
    public var tokenHash: [UInt8]

    public init(userID: UInt64, tokenHash: [UInt8]) {
        self.userID = userID
        self.tokenHash = tokenHash
    }
}

public struct DeviceEnrolled: Equatable, Sendable {
    public var deviceID: UInt64
    public var userID: UInt64
    /// Generated once on the device and kept forever; unique per user (DESIGN.md, Identity).
    public var deviceUUID: UUID128
    public var name: String
    public var platform: String
    public var model: String

    public init(
        deviceID: UInt64, userID: UInt64, deviceUUID: UUID128, name: String, platform: String, model: String
    ) {
        self.deviceID = deviceID
        self.userID = userID
        self.deviceUUID = deviceUUID
        self.name = name
        self.platform = platform
        self.model = model
    }
}

/// A new device token; every earlier token of the device stops working.
public struct DeviceTokenIssued: Equatable, Sendable {
    public var deviceID: UInt64
    public var tokenHash: [UInt8]

    public init(deviceID: UInt64, tokenHash: [UInt8]) {
        self.deviceID = deviceID
        self.tokenHash = tokenHash
    }
}

public struct DeviceTokenRevoked: Equatable, Sendable {
    public var deviceID: UInt64
    public var tokenHash: [UInt8]

    public init(deviceID: UInt64, tokenHash: [UInt8]) {
        self.deviceID = deviceID
        self.tokenHash = tokenHash
    }
}

public struct PushTokenRegistered: Equatable, Sendable {
    public var deviceID: UInt64
    public var provider: String
    public var token: String
    public var topic: String
    public var environment: String
    /// UnifiedPush / Web Push only (payload version 2): the device's P-256 public key (65 bytes,
    /// uncompressed) and authentication secret (16 bytes) that RFC 8291 encrypts to. Empty for
    /// other providers, and in version 1 records.
    public var webPushPublicKey: [UInt8]
    public var webPushAuthSecret: [UInt8]

    public init(
        deviceID: UInt64, provider: String, token: String, topic: String, environment: String,
        webPushPublicKey: [UInt8] = [], webPushAuthSecret: [UInt8] = []
    ) {
        self.deviceID = deviceID
        self.provider = provider
        self.token = token
        self.topic = topic
        self.environment = environment
        self.webPushPublicKey = webPushPublicKey
        self.webPushAuthSecret = webPushAuthSecret
    }
}

public struct PushTokenInvalidated: Equatable, Sendable {
    public var provider: String
    public var token: String
    public var reason: String

    public init(provider: String, token: String, reason: String) {
        self.provider = provider
        self.token = token
        self.reason = reason
    }
}

public struct ReportingChanged: Equatable, Sendable {
    public var deviceID: UInt64
    public var paused: Bool

    public init(deviceID: UInt64, paused: Bool) {
        self.deviceID = deviceID
        self.paused = paused
    }
}

/// A user's login password was set or changed. Only the Argon2id hash string (libsodium's
/// `crypto_pwhash_str` format, with its own salt and parameters) is stored, never the password.
public struct UserPasswordSet: Equatable, Sendable {
    public var userID: UInt64
    public var passwordHash: String

    public init(userID: UInt64, passwordHash: String) {
        self.userID = userID
        self.passwordHash = passwordHash
    }
}

public struct UserRoleChanged: Equatable, Sendable {
    public var userID: UInt64
    public var role: Role

    public init(userID: UInt64, role: Role) {
        self.userID = userID
        self.role = role
    }
}

/// The owner of `deviceID` lets `granteeUserID` see its locations, until `untilMicros` (exclusive)
/// or, when nil, until the share is revoked. Granting again replaces the earlier `until`.
public struct ShareGranted: Equatable, Sendable {
    public var deviceID: UInt64
    public var granteeUserID: UInt64
    public var untilMicros: Int64?

    public init(deviceID: UInt64, granteeUserID: UInt64, untilMicros: Int64?) {
        self.deviceID = deviceID
        self.granteeUserID = granteeUserID
        self.untilMicros = untilMicros
    }
}

public struct ShareRevoked: Equatable, Sendable {
    public var deviceID: UInt64
    public var granteeUserID: UInt64

    public init(deviceID: UInt64, granteeUserID: UInt64) {
        self.deviceID = deviceID
        self.granteeUserID = granteeUserID
    }
}
