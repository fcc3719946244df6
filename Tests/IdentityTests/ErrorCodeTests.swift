import Foundation
import HTTP
import Identity
import JSON
import Testing

/// Error codes are a closed, typed set: every one is documented for client authors, and goes on the
/// wire as its snake_case spelling.
@Test func everyAPIErrorCodeIsDocumentedInTheAPIReference() throws {
    let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs/api.md")
    let text = try String(contentsOf: docs, encoding: .utf8)
    for code in APIError.Code.allCases {
        #expect(text.contains("`\(code.rawValue)`"), "docs/api.md does not mention \(code.rawValue)")
    }
}

@Test func anErrorBodyCarriesTheCodeAsSpelledOnTheWire() throws {
    let error = APIError(status: 409, code: .batchInProgress, message: "retry")
    let body = try JSONParser.parse(error.response.body)
    #expect(error.response.status == 409)
    #expect(try body["error"]?["code"]?.stringValue == "batch_in_progress")
    #expect(error.description == "409 batch_in_progress: retry")
    for code in APIError.Code.allCases {
        #expect(code.rawValue.allSatisfy { $0 == "_" || ("a"..."z").contains($0) })
    }
}
