import Events
import Foundation
import Geofences
import HTTP
import JSON
import Synchronization
import Testing
import WebPanel

@testable import Identity
@testable import Ingest

/// A clock the tests move by hand: every window of the door's limits runs on it.
final class ManualClock: Sendable {
    private let micros = Atomic<Int64>(1_800_000_000_000_000)
    var nowMicros: Int64 { micros.load(ordering: .relaxed) }
    func advance(seconds: Double) { micros.add(Int64(seconds * 1_000_000), ordering: .relaxed) }
}

/// An ingest service with its network routes (ingest, accounts, retention) behind the permission
/// gate, answering in process on a manual clock; requests come from a client address of the
/// test's choosing and name this server as `Host: findmy.test:8080`.
final class Door: @unchecked Sendable {
    static let host = "findmy.test:8080"
    static let ownOrigin = "http://findmy.test:8080"
    let scratch = PermissionTests.Scratch()
    let clock = ManualClock()
    /// The enrolment and report routes, beside the account routes, as the server assembles them.
    let ingest: IngestService
    var service: IdentityService { ingest.identity }
    let router: Router

    init(_ configure: (inout IngestLimits) -> Void = { _ in }) throws {
        var limits = IngestLimits()
        configure(&limits)
        var options = LogOptions()
        options.diagnostics = { _ in }
        let clock = self.clock
        ingest = try IngestService(
            log: try LogWriter(directory: scratch.path + "/log", options: options), limits: limits,
            clockMicros: { clock.nowMicros })
        var builder = GuardedRouter(service: ingest, listener: .api)
        ingest.addRoutes(to: &builder)
        ingest.identity.addAccountRoutes(to: &builder)
        ingest.identity.addGeofenceRoutes(to: &builder)
        // The panel's login form and logout button post to the same routes.
        ingest.identity.answerLoginForms(with: LoginForms(identity: ingest.identity))
        router = try builder.build()
    }

    deinit { service.store.writer.close() }

    struct Answer {
        var response: HTTPResponse
        var status: Int { response.status }
        var body: JSONValue { (try? JSONParser.parse(response.body)) ?? .null }
        var errorCode: String? { try? body["error"]?["code"]?.stringValue }
        func header(_ name: String) -> String? { response.headers[name] }
        /// The value the answer's `Set-Cookie` gives cookie `name`, if it sets it.
        func cookie(_ name: String) -> String? {
            for header in response.headers.values("Set-Cookie") {
                let pair = header.split(separator: ";")[0]
                if pair.hasPrefix(name + "=") { return String(pair.dropFirst(name.count + 1)) }
            }
            return nil
        }
    }

    func send(
        _ method: String, _ target: String, headers: [(String, String)] = [], body: String = "",
        from address: String = "192.0.2.10:40000", host: String? = Door.host
    ) -> Answer {
        var fields = HTTPHeaders()
        if let host { fields.add("Host", host) }
        for (name, value) in headers { fields.add(name, value) }
        let request = HTTPRequest(
            method: method, target: target, headers: fields, body: Array(body.utf8), remoteAddress: address)
        return Answer(response: router.respond(to: request).response)
    }

    /// `POST /login` with a JSON body.
    func jsonLogin(
        _ name: String, _ password: String, from address: String = "192.0.2.10:40000",
        headers: [(String, String)] = []
    ) -> Answer {
        var writer = JSONWriter(capacity: 64)
        writer.beginObject()
        writer.key("name")
        writer.string(name)
        writer.key("password")
        writer.string(password)
        writer.endObject()
        return send(
            "POST", "/login", headers: [("Content-Type", "application/json")] + headers,
            body: String(decoding: writer.bytes, as: UTF8.self), from: address)
    }

    /// A user with a password and a session: its API token, session cookie and the session's CSRF token.
    struct LoggedIn {
        var userID: UInt64
        var token: String
        var cookie: String
        var csrf: String
    }

    func loggedInUser(_ name: String, role: Role = .member, password: String = "a long passphrase") throws
        -> LoggedIn
    {
        let created = try service.createUser(name: name, role: role)
        _ = try service.setPassword(name: name, password: password)
        let login = jsonLogin(name, password)
        guard login.status == 200, let cookie = login.cookie(IdentityService.sessionCookieName) else {
            throw DoorFailure("login of \(name): \(login.status) \(login.body)")
        }
        let csrf = (try? login.body["csrf_token"]?.stringValue) ?? ""
        return LoggedIn(userID: created.userID, token: created.token, cookie: cookie, csrf: csrf)
    }

    /// Enrols a new device for the user with `token`; its id and device token.
    func enrol(_ token: String) throws -> (id: UInt64, token: String) {
        let answer = send(
            "POST", "/api/find-my/devices", headers: [("Authorization", "Bearer \(token)")],
            body:
                "{\"device_uuid\": \"\(UUID().uuidString)\", \"name\": \"phone\", \"platform\": \"ios\", \"model\": \"\"}"
        )
        guard answer.status == 200 || answer.status == 201,
            let id = try? answer.body["device_id"]?.int64Value,
            let deviceToken = try? answer.body["device_token"]?.stringValue
        else { throw DoorFailure("enrolment: \(answer.status) \(answer.body)") }
        return (UInt64(id), deviceToken)
    }
}

struct DoorFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
