import Core
import Events
import Foundation
import Geofences
import HTTP
import Identity
import Ingest
import Testing

/// The permission table is the one place that decides who may call a route, and the share rule is
/// the one place that decides who sees whom.
@Suite struct PermissionTests {
    final class Scratch: @unchecked Sendable {
        let path: String
        init() {
            path = NSTemporaryDirectory() + "/findmy-perm-\(UInt64.random(in: 0...UInt64.max))"
            try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(atPath: path) }
    }

    func service(_ scratch: Scratch) throws -> IngestService {
        var options = LogOptions()
        options.diagnostics = { _ in }
        return try IngestService(log: try LogWriter(directory: scratch.path + "/log", options: options))
    }

    @Test func aRouteWithoutAnEntryStopsTheBuildAndIsNamed() throws {
        let scratch = Scratch()
        let service = try service(scratch)
        defer { service.log.close() }
        var table = RoutePermissions.table
        table[RouteKey("POST", "/api/find-my/report")] = nil
        var router = GuardedRouter(service: service.identity, listener: .api, table: table)
        service.addRoutes(to: &router)
        router.add("GET", "/api/find-my/brand-new") { _, _ in .text("who decided?") }
        #expect {
            _ = try router.build()
        } throws: { error in
            let text = "\(error)"
            return text.contains("POST /api/find-my/report has no permission entry")
                && text.contains("GET /api/find-my/brand-new has no permission entry")
                && text.contains("refusing to start")
        }
    }

    @Test func everyServedRouteHasAnEntryAndAdminSocketRoutesStayOffTheNetwork() throws {
        let scratch = Scratch()
        let service = try service(scratch)
        defer { service.log.close() }
        var api = GuardedRouter(service: service, listener: .api)
        service.addRoutes(to: &api)
        service.identity.addAccountRoutes(to: &api)
        service.identity.addGeofenceRoutes(to: &api)
        _ = try api.build()
        var admin = GuardedRouter(service: service, listener: .adminSocket)
        service.addAdminRoutes(to: &admin)
        service.identity.addAccountAdminRoutes(to: &admin)
        _ = try admin.build()
        // An admin-socket route registered on the network API is refused, and the reverse.
        var wrong = GuardedRouter(service: service, listener: .api)
        service.addAdminRoutes(to: &wrong)
        #expect(throws: RoutePermissionError.self) { _ = try wrong.build() }
        var wrongAdmin = GuardedRouter(service: service, listener: .adminSocket)
        service.addRoutes(to: &wrongAdmin)
        #expect(throws: RoutePermissionError.self) { _ = try wrongAdmin.build() }
    }

    @Test func theGateAppliesTheEntryBeforeTheHandler() throws {
        let scratch = Scratch()
        let service = try service(scratch)
        defer { service.log.close() }
        let member = try service.identity.createUser(name: "member", role: .member)
        let admin = try service.identity.createUser(name: "admin", role: .admin)
        var builder = GuardedRouter(service: service, listener: .api)
        service.identity.addAccountRoutes(to: &builder)
        let router = try builder.build()
        func status(_ token: String?) -> Int {
            var headers = HTTPHeaders()
            if let token { headers.add("Authorization", "Bearer \(token)") }
            let request = HTTPRequest(method: "GET", target: "/api/find-my/admin/users", headers: headers)
            return router.respond(to: request).response.status
        }
        #expect(status(nil) == 401)
        #expect(status(member.token) == 403)
        #expect(status(admin.token) == 200)
    }

    @Test func sharesShowTheDeviceUntilTheyExpireOrAreRevoked() {
        var registry = Registry(recentBatchesPerDeviceMax: 3)
        for (id, name) in [(UInt64(1), "owner"), (2, "friend"), (3, "admin")] {
            registry.apply(
                .userCreated(
                    UserCreated(
                        userID: id, name: name, role: id == 3 ? .admin : .member,
                        tokenHash: [UInt8](repeating: UInt8(id), count: 32))), offset: id - 1)
        }
        registry.apply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 7, userID: 1, deviceUUID: UUID128("1b4e28ba-2fa1-11d2-883f-0016d3cca427")!,
                    name: "phone", platform: "ios", model: "")), offset: 3)
        let owned = Registry.VisibleDevice(deviceID: 7, sharedByUserID: nil)
        let shared = Registry.VisibleDevice(deviceID: 7, sharedByUserID: 1)
        #expect(registry.visibility(of: 7, to: 1, atMicros: 0) == owned)
        #expect(registry.visibility(of: 7, to: 2, atMicros: 0) == nil)
        #expect(registry.visibility(of: 7, to: 3, atMicros: 0) == nil, "an admin sees nothing unshared")

        registry.apply(
            .shareGranted(ShareGranted(deviceID: 7, granteeUserID: 2, untilMicros: 1_000)), offset: 4)
        #expect(registry.visibility(of: 7, to: 2, atMicros: 999) == shared)
        #expect(registry.visibleDevices(to: 2, atMicros: 999) == [shared])
        // `until` is exclusive, and an expired share stops by itself, with no event.
        #expect(registry.visibility(of: 7, to: 2, atMicros: 1_000) == nil)
        #expect(registry.visibleDevices(to: 2, atMicros: 1_000).isEmpty)
        #expect(registry.visibility(of: 7, to: 3, atMicros: 999) == nil)

        // Granting again replaces `until`; without one the share lasts until revoked.
        registry.apply(
            .shareGranted(ShareGranted(deviceID: 7, granteeUserID: 2, untilMicros: nil)), offset: 5)
        #expect(registry.visibility(of: 7, to: 2, atMicros: Int64.max) == shared)
        registry.apply(.shareRevoked(ShareRevoked(deviceID: 7, granteeUserID: 2)), offset: 6)
        #expect(registry.visibility(of: 7, to: 2, atMicros: 0) == nil)
        #expect(registry.shares.isEmpty)
        #expect(registry.visibleDevices(to: 1, atMicros: 0) == [owned])
    }
}
