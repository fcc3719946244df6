// The platform services FindMyClient needs and does not implement: where fixes come from, the
// battery, what the device does for `sound` and `lost`, and where its identity is kept. The agent
// implements them for Linux; an app implements them with Core Location, AVAudio and the keychain.

/// One position as the device measured it.
public struct ClientFix: Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    /// Metres, the radius of 68 % confidence; nil when the source does not say (the server then
    /// refuses the fix: accuracy_m is required, so sources should give their best estimate).
    public var accuracyMeters: Double?
    public var altitudeMeters: Double?
    public var speedMetersPerSecond: Double?
    public var headingDegrees: Double?
    public var batteryPercent: Double?
    public var isCharging: Bool?
    /// The report's `source`: "gps", "fixed", "ondemand" (an answer to locate), ...
    public var source: String
    /// The device's clock when the fix was taken: microseconds since 1970-01-01T00:00:00Z (an app's
    /// `Date`: `Int64(date.timeIntervalSince1970 * 1_000_000)`).
    public var recordedAtMicros: Int64

    public init(
        latitude: Double, longitude: Double, accuracyMeters: Double?, altitudeMeters: Double? = nil,
        speedMetersPerSecond: Double? = nil, headingDegrees: Double? = nil,
        batteryPercent: Double? = nil, isCharging: Bool? = nil, source: String, recordedAtMicros: Int64
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
    }
}

/// Where fixes come from (gpsd, a fixed position; Core Location in an app).
public protocol FixSource: AnyObject, Sendable {
    /// Starts producing fixes; each is handed to `onFix` (on any thread) as it comes.
    func start(onFix: @escaping @Sendable (ClientFix) -> Void) throws
    func stop()
    /// A fix taken after this call, for a `locate`; nil when none came within `timeoutSeconds`.
    func freshFix(timeoutSeconds: Double) async -> ClientFix?
}

public struct BatteryState: Sendable, Equatable {
    public var percent: Double
    public var isCharging: Bool

    public init(percent: Double, isCharging: Bool) {
        self.percent = percent
        self.isCharging = isCharging
    }
}

/// The battery, read when a fix is queued; nil on a machine without one.
public protocol BatterySource: Sendable {
    func current() -> BatteryState?
}

/// What the device does for `sound` and `lost`.
public protocol DeviceActions: Sendable {
    /// Starts the alarm for `commandID` and keeps it going until `stopSound()` or `limitSeconds`.
    /// Returns at once; starting again while one plays keeps one alarm.
    func startSound(commandID: String, limitSeconds: Double)
    func stopSound()
    /// Shows "this device is lost" with the owner's message and number until `clearLost()`.
    func showLost(commandID: String, message: String, phone: String)
    func clearLost()
}

/// Where the device's identity and token are kept (a 0600 file here; the keychain in an app).
public struct DeviceCredentials: Sendable, Equatable {
    public var serverURL: String
    /// Generated once, never changed (the enrolment's `device_uuid`).
    public var deviceUUID: String
    public var deviceID: UInt64?
    public var deviceToken: String?
    public var name: String
    public var platform: String
    public var model: String

    public init(
        serverURL: String, deviceUUID: String, deviceID: UInt64?, deviceToken: String?, name: String,
        platform: String, model: String
    ) {
        self.serverURL = serverURL
        self.deviceUUID = deviceUUID
        self.deviceID = deviceID
        self.deviceToken = deviceToken
        self.name = name
        self.platform = platform
        self.model = model
    }
}

public protocol CredentialStore: Sendable {
    func load() throws -> DeviceCredentials?
    func save(_ credentials: DeviceCredentials) throws
}
