import Events
import Foundation
import Synchronization
@_exported import TestSupport
import Threads
import Workload

/// A fresh directory under /tmp, removed when the value is released.
final class TemporaryDirectory: @unchecked Sendable {
    let path: String

    init(_ label: String = "findmy-test") {
        var template = Array((NSTemporaryDirectory() + "/\(label)-XXXXXX").utf8CString)
        let result = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(result != nil, "mkdtemp failed")
        path = String(cString: result!)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    var log: String { path + "/log" }
}

func quietOptions(_ io: any FileIO = PosixFileIO()) -> LogOptions {
    var options = LogOptions()
    options.io = io
    options.diagnostics = { _ in }
    return options
}

func readAll(_ directory: String, from: UInt64 = 0) throws -> [LogRecord] {
    var records: [LogRecord] = []
    try LogReader(directory: directory).read(from: from) { record in
        records.append(record)
        return true
    }
    return records
}

func segmentFiles(_ directory: String) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".seg") }.sorted()
        .map { directory + "/" + $0 }
}

/// Random values for property-style tests, NaN and extremes included.
struct EventFuzzer {
    var random: SeededGenerator

    init(seed: UInt64) { random = SeededGenerator(seed: seed) }

    mutating func double() -> Double {
        switch Int.random(in: 0..<10, using: &random) {
        case 0:
            [
                Double.nan, -.nan, .infinity, -.infinity, 0, -0.0, .greatestFiniteMagnitude,
                .leastNonzeroMagnitude,
            ]
            .randomElement(using: &random)!
        case 1: Double(bitPattern: random.next())  // any bit pattern, NaN payloads included
        // What JSON gives for a literal with a few decimals (fix batch payload version 2 keeps these
        // as integers): the correctly rounded v / 10^k, as the parser computes it.
        case 2, 3, 4, 5:
            Double(Int64.random(in: -1_800_000_000...1_800_000_000, using: &random))
                / [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9].randomElement(using: &random)!
        default: Double.random(in: -180...180, using: &random)
        }
    }

    mutating func optionalDouble() -> Double? { Bool.random(using: &random) ? double() : nil }

    /// Unknown (nil) is stored as +0.0, so +0.0 itself is not a value a fix can hold.
    mutating func accuracy() -> Double? {
        guard Int.random(in: 0..<4, using: &random) != 0 else { return nil }
        let value = double()
        return value.bitPattern == 0 ? nil : value
    }

    mutating func clientProtocol() -> ClientProtocol {
        ClientProtocol(rawValue: UInt8.random(in: 0...ClientProtocol.rawValueMax, using: &random))!
    }

    mutating func string(maxBytes: Int = 40) -> String {
        let alphabet = Array("abcXYZ019 -_<>\"'\\é日本🙂\u{0}\n")
        return String(
            (0..<Int.random(in: 0...maxBytes / 4, using: &random)).map { _ in
                alphabet.randomElement(using: &random)!
            })
    }

    mutating func time() -> Int64 {
        switch Int.random(in: 0..<8, using: &random) {
        case 0: [Int64.min, Int64.max, 0, -1].randomElement(using: &random)!
        default: Int64.random(in: 1_500_000_000_000_000...1_900_000_000_000_000, using: &random)
        }
    }

    mutating func fix() -> Fix {
        Fix(
            latitude: double(), longitude: double(), accuracyMeters: accuracy(),
            altitudeMeters: optionalDouble(),
            speedMetersPerSecond: optionalDouble(), headingDegrees: optionalDouble(),
            batteryPercent: Bool.random(using: &random) ? UInt8.random(in: 0...255, using: &random) : nil,
            isCharging: [true, false, nil].randomElement(using: &random)!,
            source: ["significant", "ondemand", "visit", "manual", "geofence", string()].randomElement(
                using: &random)!,
            recordedAtMicros: time(), clockSuspect: Bool.random(using: &random))
    }

    mutating func hash() -> [UInt8] { (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) } }
    mutating func id() -> UInt64 { [0, 1, UInt64.max, random.next()].randomElement(using: &random)! }
    mutating func uuid() -> UUID128 { UUID128.random(using: &random) }

    mutating func event() -> Event {
        switch Int.random(in: 0..<36, using: &random) {
        case 0, 1:
            let count = [0, 1, 2, 100, Int.random(in: 0...300, using: &random)].randomElement(using: &random)!
            let rejections = (0..<Int.random(in: 0...3, using: &random)).map { _ in
                Rejection(index: UInt32.random(in: 0...10_000, using: &random), reason: string())
            }
            return .fixBatch(
                FixBatch(
                    deviceID: id(), batchID: uuid(), fixes: (0..<count).map { _ in fix() },
                    rejections: rejections, clientProtocol: clientProtocol()))
        case 2:
            return .userCreated(
                UserCreated(
                    userID: id(), name: string(), role: Bool.random(using: &random) ? .admin : .member,
                    tokenHash: hash()))
        case 3: return .userTokenIssued(UserTokenIssued(userID: id(), tokenHash: hash()))
        case 4:
            return .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: id(), userID: id(), deviceUUID: uuid(), name: string(), platform: string(),
                    model: string()))
        case 5: return .deviceTokenIssued(DeviceTokenIssued(deviceID: id(), tokenHash: hash()))
        case 6: return .deviceTokenRevoked(DeviceTokenRevoked(deviceID: id(), tokenHash: hash()))
        case 7:
            let keyed = Bool.random(using: &random)
            return .pushTokenRegistered(
                PushTokenRegistered(
                    deviceID: id(), provider: string(), token: string(maxBytes: 400), topic: string(),
                    environment: string(), webPushPublicKey: keyed ? hash() + hash() : [],
                    webPushAuthSecret: keyed ? Array(hash().prefix(16)) : []))
        case 8:
            return .pushTokenInvalidated(
                PushTokenInvalidated(provider: string(), token: string(), reason: string()))
        case 10:
            let days = Bool.random(using: &random) ? nil : UInt32.random(in: 0...UInt32.max, using: &random)
            return .retentionChanged(
                RetentionChanged(scope: Bool.random(using: &random) ? .device(id()) : .user(id()), days: days)
            )
        case 11:
            let from = Bool.random(using: &random) ? time() : nil
            let to = Bool.random(using: &random) ? time() : nil
            return .historyErased(HistoryErased(deviceID: id(), fromMicros: from, toMicros: to))
        case 12:
            return .deviceRemoved(DeviceRemoved(deviceID: id()))
        case 13:
            return .userPasswordSet(UserPasswordSet(userID: id(), passwordHash: string()))
        case 14:
            return .userRoleChanged(
                UserRoleChanged(userID: id(), role: Bool.random(using: &random) ? .admin : .member))
        case 15:
            return .shareGranted(
                ShareGranted(
                    deviceID: id(), granteeUserID: id(),
                    untilMicros: Bool.random(using: &random) ? nil : time()))
        case 16:
            return .shareRevoked(ShareRevoked(deviceID: id(), granteeUserID: id()))
        case 17:
            return .userTokenRotated(UserTokenRotated(userID: id(), tokenHash: hash()))
        case 19:
            return .regionTransition(
                RegionTransition(
                    deviceID: id(), clientProtocol: clientProtocol(),
                    kind: Bool.random(using: &random) ? .enter : .leave, recordedAtMicros: time(),
                    regionID: string(), regionName: string(), trigger: string(), latitude: optionalDouble(),
                    longitude: optionalDouble(), accuracyMeters: optionalDouble()))
        case 20:
            let waypoints = (0..<Int.random(in: 0...5, using: &random)).map { _ in
                Waypoint(
                    createdAtMicros: time(), regionID: string(), name: string(), latitude: double(),
                    longitude: double(), radiusMeters: double())
            }
            return .waypointsReported(
                WaypointsReported(
                    deviceID: id(), clientProtocol: clientProtocol(), complete: Bool.random(using: &random),
                    waypoints: waypoints))
        case 21:
            return .commandRequested(
                CommandRequested(
                    commandID: uuid(), deviceID: id(),
                    kind: CommandKindCode.allCases.randomElement(using: &random)!,
                    message: string(), phone: string(), requestedByUserID: id(), requestedAtMicros: time()))
        case 22:
            return .commandSent(
                CommandSent(commandID: uuid(), deviceID: id(), channel: string(), providerID: string()))
        case 23:
            return .commandDeliveryFailed(
                CommandDeliveryFailed(
                    commandID: uuid(), deviceID: id(), channel: string(), reason: string(),
                    retryAtMicros: Bool.random(using: &random) ? nil : time(),
                    addressDead: Bool.random(using: &random)))
        case 24:
            return .commandAnswered(
                CommandAnswered(
                    commandID: uuid(), deviceID: id(), batchOffset: id(),
                    fixIndex: UInt32.random(in: 0...UInt32.max, using: &random),
                    clientProtocol: clientProtocol()))
        case 25:
            return .commandExpired(CommandExpired(commandID: uuid(), deviceID: id(), reason: string()))
        case 26:
            return .sharePermissionChanged(
                SharePermissionChanged(
                    deviceID: id(), granteeUserID: id(), locate: Bool.random(using: &random)))
        case 27:
            return .userSettingChanged(UserSettingChanged(userID: id(), name: string(), value: string()))
        case 28:
            return .devicePresenceLinked(
                DevicePresenceLinked(deviceID: id(), userID: id(), nodeID: string(), nodeName: string()))
        case 29:
            return .presenceChanged(
                PresenceChanged(
                    deviceID: id(), nodeID: string(), online: Bool.random(using: &random),
                    lastSeenMicros: Bool.random(using: &random) ? time() : nil, observedAtMicros: time()))
        case 30:
            return .geofenceDefined(
                GeofenceDefined(
                    geofenceID: id(), ownerUserID: id(), name: string(), latitude: double(),
                    longitude: double(),
                    radiusMeters: double(),
                    deviceIDs: (0..<Int.random(in: 0...4, using: &random)).map { _ in id() }))
        case 31:
            return .geofenceDeleted(GeofenceDeleted(geofenceID: id(), ownerUserID: id()))
        case 32:
            return .geofenceNotificationsSet(
                GeofenceNotificationsSet(
                    geofenceID: id(), ownerUserID: id(), webhookURL: string(), ntfyURL: string()))
        case 33:
            let read = UInt64.random(in: 0...3, using: &random)
            let earliest = Int64.random(in: -1_000_000...1_900_000_000_000_000, using: &random)
            return .historyImported(
                HistoryImported(
                    deviceID: id(), importID: UUID128(bytes: hash().prefix(16)), format: string(),
                    fileName: string(), fileSHA256: hash(), fileBytes: id(), userID: id(), fixesRead: read,
                    fixesAccepted: id(), fixesRejected: id(), fixesDuplicate: id(), notAFix: id(),
                    recordedSpanMicros: read == 0 ? nil : earliest...(earliest + 1000),
                    batchIDs: (0..<Int.random(in: 0...4, using: &random)).map { _ in
                        UUID128(bytes: hash().prefix(16))
                    }
                ))
        case 34:
            return .deviceNtfySet(DeviceNtfySet(deviceID: id(), topicURL: string()))
        case 35:
            return .foundNoticeSet(
                FoundNoticeSet(deviceID: id(), userID: id(), armed: Bool.random(using: &random)))
        default:
            return .reportingChanged(ReportingChanged(deviceID: id(), paused: Bool.random(using: &random)))
        }
    }
}

/// A file layer that injects the faults the durability rules are about. Faults are armed by the
/// test and fire on the next matching call.
final class FaultyFileIO: FileIO, @unchecked Sendable {
    private let real = PosixFileIO()
    private let lock = NSLock()
    private var failNextWrite: Int32?
    private var shortNextWriteBytes: Int?
    private var failNextSync: Int32?
    /// Set with `failNextSync`: the failing fdatasync says it started and waits to be let go.
    private var heldSync: (entered: StopSignal, release: StopSignal)?
    private(set) var writes = 0
    /// The bytes every `pread` was given room for (what a reader asks of the file).
    var bytesAsked: Int { lock.withLock { asked } }
    private var asked = 0

    func armWriteFailure(errno: Int32) { lock.withLock { failNextWrite = errno } }
    /// The next write writes only `bytes` bytes, and the one after fails with ENOSPC.
    func armShortWrite(bytes: Int) { lock.withLock { shortNextWriteBytes = bytes } }
    func armSyncFailure(errno: Int32) { lock.withLock { failNextSync = errno } }
    /// The next fdatasync requests `entered`, waits for `release`, then fails with `errno`: what a
    /// slow disk that finally reports an error looks like to whoever waits meanwhile.
    func armSyncFailure(errno: Int32, entered: StopSignal, release: StopSignal) {
        lock.withLock {
            failNextSync = errno
            heldSync = (entered, release)
        }
    }

    func open(_ path: String, flags: Int32, mode: mode_t) throws -> Int32 {
        try real.open(path, flags: flags, mode: mode)
    }
    func close(_ fd: Int32) { real.close(fd) }

    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int, path: String) throws -> Int {
        let (failure, short): (Int32?, Int?) = lock.withLock {
            writes += 1
            defer {
                failNextWrite = nil
                if shortNextWriteBytes != nil {
                    shortNextWriteBytes = nil
                    failNextWrite = ENOSPC
                }
            }
            return (failNextWrite, shortNextWriteBytes)
        }
        if let failure { throw IOError(operation: "write", path: path, errno: failure) }
        if let short {
            return try real.pwrite(
                fd, UnsafeRawBufferPointer(rebasing: bytes.prefix(min(short, bytes.count))), at: offset,
                path: path)
        }
        return try real.pwrite(fd, bytes, at: offset, path: path)
    }

    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int, path: String) throws
        -> Int
    {
        lock.withLock { asked += buffer.count }
        return try real.pread(fd, into: buffer, at: offset, path: path)
    }

    func fdatasync(_ fd: Int32, path: String) throws {
        let (failure, held) = lock.withLock { () -> (Int32?, (entered: StopSignal, release: StopSignal)?) in
            defer {
                failNextSync = nil
                heldSync = nil
            }
            return (failNextSync, heldSync)
        }
        if let failure {
            if let held {
                held.entered.request()
                held.release.wait()
            }
            throw IOError(operation: "fdatasync", path: path, errno: failure)
        }
        try real.fdatasync(fd, path: path)
    }

    func fsync(_ fd: Int32, path: String) throws { try real.fsync(fd, path: path) }
    func ftruncate(_ fd: Int32, size: Int, path: String) throws {
        try real.ftruncate(fd, size: size, path: path)
    }
    func fileSize(_ fd: Int32, path: String) throws -> Int { try real.fileSize(fd, path: path) }
    func rename(_ from: String, _ to: String) throws { try real.rename(from, to) }
    func unlink(_ path: String) throws { try real.unlink(path) }
    func list(_ directory: String) throws -> [String] { try real.list(directory) }
    func makeDirectory(_ path: String) throws { try real.makeDirectory(path) }
}

/// A value shared between test threads.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) { mutex = Mutex(value) }

    func withLock<R>(_ body: (inout Value) -> R) -> R { mutex.withLock { body(&$0) } }
}
