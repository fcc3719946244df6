import Commands
import Core
import Crypto
import Identity
import JSON
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// Where the channels find a device's push tokens: Core's registry, read under its lock
/// (`IdentityService` conforms), or in tests a registry of their own.
public protocol PushTokenSource: Sendable {
    func pushRegistrations(deviceID: UInt64) -> [(
        key: Registry.PushKey, registration: Registry.PushRegistration
    )]
    func pushRegistration(provider: String, token: String) -> Registry.PushRegistration?
}

extension IdentityService: PushTokenSource {}

/// The addresses among `registrations` of each of `providers`, in that order (the providers' order
/// is the channel's preference; within one, the registry's).
func pushAddresses(_ registrations: [DevicePushRegistration], providers: [String]) -> [ChannelAddress] {
    var found: [ChannelAddress] = []
    for provider in providers {
        for (key, registration) in registrations where key.provider == provider {
            found.append(
                ChannelAddress(
                    provider: provider, token: key.token, topic: registration.topic,
                    environment: registration.environment))
        }
    }
    return found
}

/// The wall clock in microseconds since 1970: JWT times (`iat`, `exp`) are wall-clock times the
/// provider compares with its own. Injected so that tests can move it.
public typealias WallClockMicros = @Sendable () -> Int64

public func systemWallClockMicros() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
}

/// A compact JWS (RFC 7515) of a JWT: base64url(header) "." base64url(claims) "." base64url(signature).
enum JWT {
    static func sign(header: JSONObject, claims: JSONObject, key: PrivateKey) -> String {
        let input =
            Base64URL.encode(JSONWriter.encode(.object(header))) + "."
            + Base64URL.encode(JSONWriter.encode(.object(claims)))
        let signature =
            switch key.kind {
            case .p256: key.signES256(Array(input.utf8))
            case .rsa: key.signRS256(Array(input.utf8))
            }
        return input + "." + Base64URL.encode(signature)
    }
}

/// How long to wait before trying an address again when the provider said nothing: 2 s after the
/// first failure, doubling up to `delaySecondsMax`, per address; a success forgets the address.
final class Backoff: Sendable {
    static let delaySecondsFirst = 2
    static let delaySecondsMax = 300
    /// Addresses remembered at most; the oldest failures are forgotten first beyond it.
    static let addressesMax = 100_000
    private let failures = Locked<[String: Int]>([:])

    func failed(_ address: String) -> Int {
        failures.withLock { failures in
            if failures.count >= Self.addressesMax { failures.removeAll() }
            let count = (failures[address] ?? 0) + 1
            failures[address] = count
            return min(Self.delaySecondsMax, Self.delaySecondsFirst << min(count - 1, 16))
        }
    }

    func succeeded(_ address: String) { _ = failures.withLock { $0.removeValue(forKey: address) } }

    /// `Retry-After` in seconds when the provider sent one (RFC 9110 also allows an HTTP date;
    /// that form falls back to the backoff), else the backoff.
    func retryDelay(_ address: String, retryAfter: String?) -> Int {
        let backoff = failed(address)
        if let retryAfter, let seconds = Int(retryAfter.trimmingSpaces()), seconds >= 0 {
            return min(seconds, 24 * 3600)
        }
        return backoff
    }
}

extension String {
    func trimmingSpaces() -> String {
        var slice = self[...]
        while slice.first == " " { slice = slice.dropFirst() }
        while slice.last == " " { slice = slice.dropLast() }
        return String(slice)
    }
}

/// What every provider's payload says about the command, so the device can act and answer with
/// `in_reply_to`: the command id, its kind, and for `lost` the message and phone.
func commandMembers(_ delivery: CommandDelivery) -> [JSONObject.Member] {
    var members = [
        JSONObject.Member(key: "command_id", value: .string(delivery.commandID)),
        JSONObject.Member(key: "kind", value: .string(delivery.kind.rawValue)),
    ]
    if let message = delivery.message { members.append(.init(key: "message", value: .string(message))) }
    if let phone = delivery.phone { members.append(.init(key: "phone", value: .string(phone))) }
    return members
}

/// How long a provider should keep trying to reach an offline device, per kind: a locate is
/// worthless after a few minutes (the command expires), a sound after an hour, lost mode matters
/// until it arrives (providers keep a message at most about four weeks).
func timeToLiveSeconds(_ kind: CommandKind) -> Int {
    switch kind {
    case .locate: 300
    case .sound: 3600
    case .lost, .found: 7 * 24 * 3600
    }
}

/// The `error.status` or first `errorCode` of a Google API error body, or the APNs `reason`.
func errorField(_ body: [UInt8], _ key: String) -> String? {
    guard case .object(let object)? = try? JSONParser.parse(body) else { return nil }
    if case .string(let value)? = object[key] { return value }
    return nil
}
