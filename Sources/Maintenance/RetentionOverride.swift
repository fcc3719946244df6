import CLI
import HTTP
import Identity
import Ingest

/// `findmy retention set` once parsed: an admin's retention override, through the server's admin
/// socket when it runs, otherwise appended to the log opened here.
package enum RetentionOverride {
    /// Sends `request` (the device or user, and the days or null) and prints what was recorded.
    package static func set(data: String, request: [UInt8], json: Bool) throws -> Int32 {
        let answer = try AdminCall.send(data: data, "POST", "/admin/retention", body: request) { log in
            let service = try IngestService(log: log)
            var router = GuardedRouter(service: service, listener: .adminSocket)
            service.addAdminRoutes(to: &router)
            return (try router.build(), {})
        }
        let document = try AdminCall.check(answer)
        if json {
            printLine(String(decoding: answer.body, as: UTF8.self))
        } else {
            let days =
                (try? document["days"]?.int64Value).map { "\($0) days" } ?? "cleared (back to the default)"
            printLine("retention \(days), offset \((try? document["offset"]?.int64Value) ?? 0)")
        }
        return 0
    }
}
