import Foundation
import QRCode
import Testing

@testable import WebPanel

/// The QR code the "Add a device" page draws scans back to its link: the SVG's path is rasterised
/// (8 pixels per module) and read by Debian's `zbarimg` (zbar-tools, installed by
/// `ops/install-deps.sh --test`), a decoder that shares no code with libqrencode.
@Suite struct QRCodeScanTests {
    /// The dark modules of the drawn SVG, as the rows of a bitmap of `side` x `side` modules.
    func raster(_ svg: String) throws -> (side: Int, dark: Set<Int>) {
        let viewBox = try #require(svg.range(of: "viewBox=\"0 0 "))
        let side = try #require(Int(svg[viewBox.upperBound...].prefix { $0.isNumber }))
        let start = try #require(svg.range(of: "<path fill=\"#000\" d=\""))
        let path = svg[start.upperBound...].prefix { $0 != "\"" }
        var dark: Set<Int> = []
        // Each run is "M<x> <y>h<width>v1h-<width>z".
        for run in path.split(separator: "z") {
            let numbers = run.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
            try #require(numbers.count == 5 && numbers[3] == 1, "run '\(run)'")
            for x in numbers[0]..<(numbers[0] + numbers[2]) { dark.insert(numbers[1] * side + x) }
        }
        return (side, dark)
    }

    func scan(_ link: String) throws -> String {
        var html = HTML()
        qrSVG(try QRCode(encoding: link), into: &html)
        let (side, dark) = try raster(String(decoding: html.bytes, as: UTF8.self))
        let scale = 8
        var image = Array("P5 \(side * scale) \(side * scale) 255\n".utf8)
        for y in 0..<(side * scale) {
            for x in 0..<(side * scale) {
                image.append(dark.contains((y / scale) * side + x / scale) ? 0 : 255)
            }
        }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("findmy-qr-\(UUID()).pgm")
        try Data(image).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let zbarimg = "/usr/bin/zbarimg"
        try #require(
            FileManager.default.isExecutableFile(atPath: zbarimg),
            "zbarimg is missing: install zbar-tools (ops/install-deps.sh --test)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: zbarimg)
        process.arguments = ["--quiet", "--raw", file.path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let bytes = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .newlines)
    }

    @Test func setupLinksScanBackExactly() throws {
        let links = [
            "overland://setup?url=https%3A%2F%2Ffindmy.example.org%2Fapi%2Ffind-my%2Foverland&token=y_0k3tLEObY-9u-b64Kor-gNkxYtVO23V79Pcb_qUB0&device_id=kims-phone",
            "owntracks:///config?inline="
                + String(repeating: "eyJfdHlwZSI6ImNvbmZpZ3VyYXRpb24iLCJtb2RlIjozfQ%3D%3D", count: 6),
        ]
        for link in links {
            #expect(try scan(link) == link)
        }
    }
}
