import Testing

@testable import WebPanel

@Suite struct PanelUnitTests {
    @Test func everyValueIsEscaped() {
        var html = HTML()
        html.raw("<p title=\"")
        html.attribute("\"><script>alert(1)</script>'")
        html.raw("\">")
        html.text("<script>alert(1)</script> & co")
        html.raw("</p>")
        let text = String(decoding: html.bytes, as: UTF8.self)
        #expect(
            text
                == "<p title=\"&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&#39;\">&lt;script&gt;alert(1)&lt;/script&gt; &amp; co</p>"
        )
    }

    @Test func tileSourcesForTheContentSecurityPolicy() {
        #expect(
            cspSource(tileURL: "https://tile.openstreetmap.org/{z}/{x}/{y}.png")
                == "https://tile.openstreetmap.org")
        #expect(
            cspSource(tileURL: "https://{s}.tile.example.org/{z}/{x}/{y}.png") == "https://*.tile.example.org"
        )
        #expect(cspSource(tileURL: "http://127.0.0.1:9/{z}/{x}/{y}.png") == "http://127.0.0.1:9")
        #expect(cspSource(tileURL: "javascript:alert(1)") == "'none'")
        #expect(cspSource(tileURL: "https://evil.org; script-src *") == "'none'")
    }

    /// A day at one fix a minute: a drive, a two-hour stop, a drive back. Thinned to far fewer
    /// points, with both ends of the stop kept.
    @Test func simplifyingKeepsWhereTheDeviceStopped() {
        var points: [TrackSimplifier.Point] = []
        var micros: Int64 = 0
        func add(_ latitude: Double, _ longitude: Double) {
            points.append(.init(latitude: latitude, longitude: longitude, recordedAtMicros: micros))
            micros += 60_000_000
        }
        for step in 0..<600 { add(52.5 + Double(step) * 0.0005, 13.4 + sin(Double(step) / 40) * 0.001) }
        let stopStart = points.count
        for step in 0..<120 { add(52.8 + Double(step % 3) * 0.00001, 13.4) }
        let stopEnd = points.count - 1
        for step in 1...600 { add(52.8 - Double(step) * 0.0005, 13.4) }
        let kept = TrackSimplifier().keep(points)
        #expect(kept.count < points.count / 5)
        #expect(kept.first == 0 && kept.last == points.count - 1)
        #expect(kept.contains(stopStart) && kept.contains(stopEnd))
        #expect(kept == kept.sorted())
        // A short track is drawn whole.
        #expect(TrackSimplifier().keep(Array(points.prefix(100))) == Array(0..<100))
    }
}

#if canImport(Glibc)
    import Glibc
#endif
