import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// A share's end ends every view derived from the device at once (docs/privacy.md, "When a share
/// ends"): alice shares her phone with bob, bob watches it with a geofence whose webhook is a
/// receiver on loopback (ops/tests/webhook_receiver.py); after alice revokes the share, or after its
/// `until` passes on the server's test clock (`FINDMY_TEST_CLOCK_OFFSET_FILE`), nothing the phone
/// does reaches bob: not his webhook, not a retry queued while the share held, not one of his
/// reads, and not after a restart either. Alice's own fence on the phone keeps notifying her, which
/// is also how the test knows the notifier has looked at the phone's later transitions.
@Suite(.serialized) struct ShareEndTests {
    let home = 52.52
    let away = 52.53  // 1.1 km north of a 100 m fence
    static let phoneName = "alices-phone"

    final class Setup {
        let data: ScratchDirectory
        /// Holds the clock offset file, beside (not in) the data directory.
        let clockDirectory: ScratchDirectory
        var clockFile: String { clockDirectory.path + "/offset-seconds" }
        let receiver: FakeProvider
        var server: ServerProcess
        var connection: HTTPConnection
        let alice: String
        let bob: String
        let phoneID: Int64
        let phoneToken: String
        let bobDeviceToken: String
        var bobFenceID: Int64 = 0

        init(
            data: ScratchDirectory, clockDirectory: ScratchDirectory, receiver: FakeProvider,
            server: ServerProcess,
            alice: String, bob: String, phoneID: Int64, phoneToken: String, bobDeviceToken: String
        ) {
            self.data = data
            self.clockDirectory = clockDirectory
            self.receiver = receiver
            self.server = server
            self.connection = HTTPConnection(address: server.address)
            self.alice = alice
            self.bob = bob
            self.phoneID = phoneID
            self.phoneToken = phoneToken
            self.bobDeviceToken = bobDeviceToken
        }

        static func startServer(_ data: ScratchDirectory, clockFile: String) throws -> ServerProcess {
            try ServerProcess(
                data: data.path, extraArguments: ["--projector", "on", "--geofence-retry-base-seconds", "1"],
                environment: ["FINDMY_TEST_CLOCK_OFFSET_FILE": clockFile])
        }

        func restart() throws {
            _ = server.stop()
            server = try Self.startServer(data, clockFile: clockFile)
            connection = HTTPConnection(address: server.address)
        }

        func stop() {
            _ = server.stop()
            receiver.stop()
        }
    }

    /// A fence of `token`'s user around home on alice's phone, announcing to the receiver's `path`.
    func fence(_ setup: Setup, token: String, name: String, path: String) throws -> Int64 {
        let created = try send(
            setup.connection, "POST", "/api/find-my/geofences", token: token,
            body:
                "{\"name\": \"\(name)\", \"latitude\": \(home), \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(setup.phoneID)]}"
        )
        #expect(created.status == 201, "\(created.body)")
        let fenceID = try #require(created.int("geofence_id"))
        let set = try send(
            setup.connection, "PUT", "/api/find-my/geofences/\(fenceID)/notifications", token: token,
            body: "{\"webhook_url\": \"http://127.0.0.1:\(setup.receiver.port)\(path)\"}")
        #expect(set.status == 200, "\(set.body)")
        return fenceID
    }

    /// Users alice (a phone) and bob (a device of his own, for OwnTracks' Friends); the phone shared
    /// with bob, who may also locate it, until `shareUntil` (nil: until revoked); bob's fence
    /// announcing to /bob-hook and alice's to /alice-hook; the phone's first fix at home.
    func setUp(_ label: String, shareUntil: String?) throws -> Setup {
        let receiver = try FakeProvider("receiver", script: "webhook_receiver.py")
        let data = ScratchDirectory(label)
        let clockDirectory = ScratchDirectory(label + "-clock")
        let clockFile = clockDirectory.path + "/offset-seconds"
        let setup: Setup
        do {
            try "0\n".write(toFile: clockFile, atomically: true, encoding: .utf8)
            let tokens = try ["alice", "bob"].map { try addUser($0, data: data.path) }
            let server = try Setup.startServer(data, clockFile: clockFile)
            let connection = HTTPConnection(address: server.address)
            do {
                let phone = try enrol(
                    connection, userToken: tokens[0], uuid: UUID().uuidString, name: Self.phoneName)
                let bobs = try enrol(connection, userToken: tokens[1], uuid: UUID().uuidString, name: "bobs")
                setup = Setup(
                    data: data, clockDirectory: clockDirectory, receiver: receiver, server: server,
                    alice: tokens[0],
                    bob: tokens[1], phoneID: try #require(phone.int("device_id")),
                    phoneToken: try #require(phone.string("device_token")),
                    bobDeviceToken: try #require(bobs.string("device_token")))
            } catch {
                _ = server.stop()
                throw error
            }
        } catch {
            receiver.stop()
            throw error
        }
        do {
            let until = shareUntil.map { ", \"until\": \"\($0)\"" } ?? ""
            let shared = try post(
                setup.connection, "/api/find-my/devices/\(setup.phoneID)/shares", token: setup.alice,
                body: "{\"user\": \"bob\", \"permission\": \"locate\"\(until)}")
            #expect(shared.status == 201, "\(shared.body)")
            setup.bobFenceID = try fence(setup, token: setup.bob, name: "Watch", path: "/bob-hook")
            _ = try fence(setup, token: setup.alice, name: "Home", path: "/alice-hook")
            try report(setup, latitude: home, secondsAgo: 120)
            return setup
        } catch {
            setup.stop()
            throw error
        }
    }

    /// Reports one fix of the phone; returns the commands its answer hands the phone.
    @discardableResult
    func report(_ setup: Setup, latitude: Double, secondsAgo: Int) throws -> [JSONValue] {
        let answer = try post(
            setup.connection, "/api/find-my/report", token: setup.phoneToken,
            body: reportBody(
                batchID: UUID().uuidString, fixes: [fixJSON(latitude: latitude, secondsAgo: secondsAgo)]))
        #expect(answer.status == 200, "\(answer.body)")
        return (try? answer.body["commands"]?.arrayValue) ?? []
    }

    func path(_ request: JSONObject) -> String { (try? request["path"]?.stringValue) ?? "" }

    /// The requests to `path` the receiver has printed, answered or not.
    func hooks(_ setup: Setup, _ path: String) -> [JSONObject] {
        setup.receiver.requests.filter { self.path($0) == path }
    }

    func notifier(_ setup: Setup) throws -> JSONValue {
        try JSONParser.parse(try setup.connection.send("GET", "/healthz").body)["geofence-notifier"] ?? .null
    }

    /// Bob's views of the phone: device list, device, locations, arrivals, transitions, commands,
    /// his fence's transitions and deliveries, OwnTracks' Friends and the panel. `shared`: what he
    /// sees while the share holds; else nothing of the phone anywhere.
    func checkBobsViews(_ setup: Setup, shared: Bool) throws {
        let c = setup.connection
        let base = "/api/find-my/devices/\(setup.phoneID)"
        // The list reads the projection, which may not hold the phone's row yet while it is shared.
        var listed = Answer(status: 0, body: .null)
        let listsPhone = try waitUntil(timeoutSeconds: shared ? 120 : 0) {
            listed = try get(c, "/api/find-my/devices", token: setup.bob)
            return ((try? listed.body["devices"]?.arrayValue) ?? []).contains {
                (try? $0["id"]?.int64Value) == setup.phoneID
            }
        }
        #expect(listed.status == 200 && listsPhone == shared, "\(listed.body)")
        if shared {
            for target in [base, base + "/locations", base + "/commands"] {
                let answer = try get(c, target, token: setup.bob)
                #expect(answer.status == 200, "\(target): \(answer.body)")
            }
        } else {
            for target in [
                base, base + "/locations", base + "/arrivals", base + "/transitions", base + "/commands",
            ] {
                let answer = try get(c, target, token: setup.bob)
                #expect(answer.status == 404, "\(target): \(answer.status) \(answer.body)")
            }
            let command = try send(
                c, "POST", base + "/commands", token: setup.bob, body: #"{"kind": "locate"}"#)
            #expect(command.status == 404, "\(command.body)")
        }
        let fence = "/api/find-my/geofences/\(setup.bobFenceID)"
        let transitions = try get(c, fence + "/transitions", token: setup.bob)
        #expect(transitions.status == 200, "\(transitions.body)")
        let deliveries = try get(c, fence + "/deliveries", token: setup.bob)
        #expect(deliveries.status == 200, "\(deliveries.body)")
        if !shared {
            #expect(try transitions.body["transitions"]?.arrayValue.isEmpty == true, "\(transitions.body)")
            #expect(try deliveries.body["deliveries"]?.arrayValue.isEmpty == true, "\(deliveries.body)")
        }
        // OwnTracks on bob's own device, asking for Friends.
        let tid = OwnTracksFriendsTests.tid(setup.phoneID)
        let published = try OwnTracksHTTPTests.publish(
            c,
            Array(#"{"_type":"location","lat":48.1,"lon":11.5,"acc":10,"tst":1764756000,"tid":"bo"}"#.utf8),
            auth: OwnTracksHTTPTests.basic("bob", setup.bobDeviceToken), query: "?friends=1")
        #expect(published.status == 200)
        let friends = (try? JSONParser.parse(published.body).arrayValue) ?? []
        if !shared { #expect(!friends.contains { $0["tid"] == .string(tid) }, "\(friends)") }
        // The panel (a bearer token is a user's credential there as well).
        let panel = try c.send("GET", "/find-my", headers: [("Authorization", "Bearer \(setup.bob)")])
        #expect(panel.status == 200)
        #expect(String(decoding: panel.body, as: UTF8.self).contains(Self.phoneName) == shared)
    }

    /// What the test does between the share's start and its end, and after: the phone leaves (both
    /// fences announce it, bob's views show it), then comes home while the receiver fails, so that
    /// bob's delivery waits for a retry when `end` ends the share. That retry is withheld; later
    /// movements, also after a restart, reach alice alone.
    func walk(_ setup: Setup, end: () throws -> Void) throws {
        try report(setup, latitude: away, secondsAgo: 60)
        #expect(setup.receiver.requests(atLeast: 1) { path($0) == "/bob-hook" }.count == 1)
        #expect(setup.receiver.requests(atLeast: 1) { path($0) == "/alice-hook" }.count == 1)
        try checkBobsViews(setup, shared: true)
        // Bob marks the phone lost: the phone's next report answer carries his message.
        let lost = try send(
            setup.connection, "POST", "/api/find-my/devices/\(setup.phoneID)/commands", token: setup.bob,
            body: #"{"kind": "lost", "message": "call bob", "phone": "+49 30 1234567"}"#)
        #expect(lost.status == 202 || lost.status == 201, "\(lost.body)")
        let lostID = try #require(lost.string("command_id"))

        try setup.receiver.command("fail 1000")
        let handed = try report(setup, latitude: home, secondsAgo: 30)
        #expect(handed.contains { $0["command_id"] == .string(lostID) }, "\(handed)")
        _ = setup.receiver.requests(atLeast: 1) { path($0) == "/bob-hook" && $0["status"] == .integer(500) }
        try end()
        // The next retry of bob's finds the share ended: deleted unsent. Only then may the receiver
        // answer again, so that a retry already on its way at the end cannot be taken for a leak.
        let withheld = waitUntil(timeoutSeconds: 60) {
            let count = try? notifier(setup)["withheld"]?.int64Value
            return (count ?? 0) >= 1
        }
        #expect(withheld, "\((try? notifier(setup)) ?? .null)")
        let bobsAtEnd = hooks(setup, "/bob-hook").count
        try setup.receiver.command("fail 0")

        // Alice's enter (retried) and the next leave reach her; nothing more reaches bob, and bob's
        // command is handed to the phone no more: it ends, as alice sees in the phone's commands.
        #expect(try report(setup, latitude: away, secondsAgo: 0).isEmpty)
        var commands = Answer(status: 0, body: .null)
        let ended = try waitUntil {
            commands = try get(
                setup.connection, "/api/find-my/devices/\(setup.phoneID)/commands", token: setup.alice)
            return ((try? commands.body["commands"]?.arrayValue) ?? []).contains {
                $0["command_id"] == .string(lostID) && $0["state"] == .string("expired")
            }
        }
        #expect(ended, "\(commands.body)")
        let alices = setup.receiver.requests(atLeast: 3) {
            path($0) == "/alice-hook" && $0["status"] == .integer(200)
        }
        #expect(alices.count >= 3)
        #expect(hooks(setup, "/bob-hook").count == bobsAtEnd, "\(hooks(setup, "/bob-hook"))")
        try checkBobsViews(setup, shared: false)
        let metrics = String(decoding: try setup.connection.send("GET", "/metrics").body, as: UTF8.self)
        #expect(OwnTracksHTTPTests.metric(metrics, "findmy_geofence_notifications_withheld_total") ?? 0 >= 2)

        // A restart replays the log and rebuilds the registry: it decides the same.
        try setup.restart()
        #expect(try report(setup, latitude: home, secondsAgo: 0).isEmpty)
        _ = setup.receiver.requests(atLeast: 4) {
            path($0) == "/alice-hook" && $0["status"] == .integer(200)
        }
        #expect(hooks(setup, "/bob-hook").count == bobsAtEnd, "\(hooks(setup, "/bob-hook"))")
        try checkBobsViews(setup, shared: false)
    }

    @Test func aRevokedShareEndsEveryViewOfTheDevice() throws {
        let setup = try setUp("findmy-share-end-revoke", shareUntil: nil)
        defer { setup.stop() }
        try walk(setup) {
            let revoked = try send(
                setup.connection, "DELETE", "/api/find-my/devices/\(setup.phoneID)/shares/bob",
                token: setup.alice)
            #expect(revoked.status == 200 || revoked.status == 204, "\(revoked.body)")
        }
    }

    @Test func anExpiredShareEndsEveryViewOfTheDevice() throws {
        // Ten minutes from now; the server's clock then moves fifteen minutes on.
        let until = RFC3339.formatMillis(Int64(Date().timeIntervalSince1970 * 1_000_000) + 600_000_000)
        let setup = try setUp("findmy-share-end-expiry", shareUntil: until)
        defer { setup.stop() }
        try walk(setup) {
            try "900\n".write(toFile: setup.clockFile, atomically: true, encoding: .utf8)
        }
    }
}
