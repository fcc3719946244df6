import FindMyClient
import Foundation
import GPSDSupport
import TestSupport
import Testing
import Threads

@testable import findmy_agent

/// `GPSDFixSource` against a real gpsd that gpsfake feeds from Fixtures/agent/track.nmea.
@Suite(.serialized) struct GPSDFixSourceTests {
    let track = try! NMEATrack(path: NMEATrack.fixturePath)

    @Test func theFixesAreTheTracksEpochsInOrderEachOnce() throws {
        let epochs = track.epochs
        #expect(epochs.count == 60)
        let fake = try GPSFake(track: NMEATrack.fixturePath, once: true, sentenceSeconds: 0.02)
        defer { fake.stop() }
        let fixes = Locked<[ClientFix]>([])
        let source = GPSDFixSource(port: Int(fake.port))
        try source.start { fix in fixes.withLock { $0.append(fix) } }
        defer { source.stop() }
        let last = epochs.last!.timeMicros
        try waitUntil("the track's last epoch from gpsd") {
            fixes.withLock { $0.last?.recordedAtMicros == last }
        }

        let received = fixes.withLock { $0 }
        // The source connected while gpsfake was already writing: the first epochs may be gone,
        // but from the first fix it gave on, every epoch comes, once and in order.
        let firstIndex = try #require(
            epochs.firstIndex {
                $0.timeMicros == received[0].recordedAtMicros
            })
        #expect(received.count == epochs.count - firstIndex)
        for (fix, epoch) in zip(received, epochs[firstIndex...]) {
            #expect(fix.recordedAtMicros == epoch.timeMicros)
            #expect(abs(fix.latitude - epoch.latitude) < 1e-8, "\(fix) against \(epoch)")
            #expect(abs(fix.longitude - epoch.longitude) < 1e-8, "\(fix) against \(epoch)")
            #expect(abs(fix.speedMetersPerSecond! - epoch.speedMetersPerSecond) < 0.01)
            #expect(fix.headingDegrees == epoch.courseDegrees)
            #expect(fix.altitudeMeters == epoch.altitudeMeters)
            #expect(
                fix.accuracyMeters.map { $0 > 0 && $0 < 100 } == true,
                "accuracy \(String(describing: fix.accuracyMeters))")
            #expect(fix.source == "gps")
        }
    }

    @Test func itConnectsAgainWhenGPSDComesBack() throws {
        let port = try GPSFake.freePort()
        let log = Locked<[String]>([])
        let fixes = Locked<[ClientFix]>([])
        var fake = try GPSFake(track: NMEATrack.fixturePath, once: false, port: port)
        let source = GPSDFixSource(port: Int(port), log: { line in log.withLock { $0.append(line) } })
        try source.start { fix in fixes.withLock { $0.append(fix) } }
        defer { source.stop() }
        try waitUntil("a fix from the first gpsd") { fixes.withLock { !$0.isEmpty } }
        fake.stop()
        try waitUntil("the source noticing that gpsd went away") {
            log.withLock { $0.contains { $0.contains("127.0.0.1:\(port)") && $0.contains("lost") } }
        }
        let before = fixes.withLock { $0.count }
        fake = try GPSFake(track: NMEATrack.fixturePath, once: false, port: port)
        defer { fake.stop() }
        try waitUntil("a fix from the second gpsd") { fixes.withLock { $0.count > before } }
    }

    @Test func aFreshFixIsOneTakenAfterTheCall() async throws {
        let fake = try GPSFake(track: NMEATrack.fixturePath, once: false)
        defer { fake.stop() }
        let fixes = Locked<[ClientFix]>([])
        let source = GPSDFixSource(port: Int(fake.port))
        try source.start { fix in fixes.withLock { $0.append(fix) } }
        defer { source.stop() }
        try waitUntil("a first fix") { fixes.withLock { !$0.isEmpty } }
        let countBefore = fixes.withLock { $0.count }
        let fresh = try #require(await source.freshFix(timeoutSeconds: 60))
        let after = fixes.withLock { Array($0[countBefore...]) }
        #expect(after.first == fresh, "the fresh fix is the first one gpsd gave after the call")
    }

    @Test func noFreshFixWithoutGPSD() async throws {
        let source = GPSDFixSource(port: Int(try GPSFake.freePort()))
        try source.start { _ in }
        defer { source.stop() }
        #expect(await source.freshFix(timeoutSeconds: 0.2) == nil)
    }
}

/// gpsd's TPV reports as gpsd 3.22 wrote them for the fixture's track, read into fixes.
@Suite struct GPSDReportTests {
    @Test func aThreeDimensionalFixWithItsErrorEstimate() throws {
        let line = """
            {"class":"TPV","device":"/dev/pts/1","mode":3,"time":"2026-03-14T10:00:01.000Z","ept":0.005,\
            "lat":52.520008833,"lon":13.405014667,"altHAE":73.5000,"altMSL":34.1000,"alt":34.1000,\
            "track":45.0000,"magtrack":49.0590,"magvar":4.1,"speed":1.399,"climb":0.100,"geoidSep":39.400,\
            "eph":17.100}
            """
        let fix = try #require(GPSDReport.fix(line: Array(line.utf8)))
        #expect(fix.latitude == 52.520008833)
        #expect(fix.longitude == 13.405014667)
        #expect(fix.altitudeMeters == 34.1)
        #expect(fix.speedMetersPerSecond == 1.399)
        #expect(fix.headingDegrees == 45)
        #expect(fix.recordedAtMicros == 1_773_482_401_000_000)
        // gpsd's eph is a 95 % radius; the report's accuracy_m is the 68 % one.
        #expect(abs(fix.accuracyMeters! - 17.1 * GPSDReport.radius68PerRadius95) < 1e-9)
        #expect(fix.source == "gps")
    }

    @Test func perAxisEstimatesWhenThereIsNoEph() throws {
        let line =
            #"{"class":"TPV","mode":2,"time":"2026-03-14T10:00:01.000Z","lat":1.5,"lon":-2.5,"epx":3.0,"epy":4.0}"#
        let fix = try #require(GPSDReport.fix(line: Array(line.utf8)))
        let sigma = ((3.0 * 3.0 + 4.0 * 4.0) / 2).squareRoot() / 1.96
        #expect(abs(fix.accuracyMeters! - sigma * 1.5096) < 1e-3)
        #expect(fix.altitudeMeters == nil)
        #expect(fix.speedMetersPerSecond == nil)
    }

    @Test func altitudeAboveSeaLevelFromTheEllipsoidAndTheGeoid() throws {
        let line =
            #"{"class":"TPV","mode":3,"time":"2026-03-14T10:00:01Z","lat":1,"lon":2,"altHAE":73.5,"geoidSep":39.4,"eph":5}"#
        let fix = try #require(GPSDReport.fix(line: Array(line.utf8)))
        #expect(abs(fix.altitudeMeters! - 34.1) < 1e-9)
    }

    @Test func whatIsNotAFix() {
        let lines = [
            // No fix yet, or only a time.
            #"{"class":"TPV","mode":1,"time":"2026-03-14T10:00:01Z"}"#,
            #"{"class":"TPV","mode":0}"#,
            // A 2-D fix without any error estimate: the server requires accuracy_m.
            #"{"class":"TPV","device":"/dev/pts/1","mode":2,"time":"2026-03-14T10:00:00.000Z","ept":0.005,"lat":52.52,"lon":13.405,"track":45.0,"speed":1.399}"#,
            // Other reports, and what is not JSON.
            #"{"class":"SKY","hdop":0.9}"#,
            #"{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}"#,
            #"{"class":"TPV","mode":3,"lat":"52","lon":13,"eph":3}"#,
            #"{"class":"TPV","mode":3,"lat":95,"lon":13,"eph":3}"#,
            "not json",
            "",
        ]
        for line in lines {
            #expect(GPSDReport.fix(line: Array(line.utf8)) == nil, "\(line)")
        }
    }

    @Test func aCourseOf360IsNorth() throws {
        let line =
            #"{"class":"TPV","mode":2,"time":"2026-03-14T10:00:01Z","lat":1,"lon":2,"eph":5,"track":360.0}"#
        #expect(try #require(GPSDReport.fix(line: Array(line.utf8))).headingDegrees == 0)
    }

    @Test func theLineReaderSplitsWhateverTheChunks() {
        let text = Array("{\"a\":1}\r\n{\"b\":2}\r\n{\"c\"".utf8)
        for chunkSize in [1, 2, 5, text.count] {
            var reader = GPSDLineReader()
            var lines: [String] = []
            var index = 0
            while index < text.count {
                let end = min(text.count, index + chunkSize)
                reader.append(text[index..<end])
                while let line = reader.nextLine() { lines.append(String(decoding: line, as: UTF8.self)) }
                index = end
            }
            #expect(lines == [#"{"a":1}"#, #"{"b":2}"#], "chunks of \(chunkSize)")
        }
    }

    @Test func anOverlongLineIsDroppedNotKept() {
        var reader = GPSDLineReader()
        reader.append(ArraySlice(repeating: UInt8(ascii: "x"), count: GPSDLineReader.lineBytesMax + 10))
        #expect(reader.nextLine() == nil)
        reader.append(ArraySlice(Array("tail\n{\"ok\":1}\n".utf8)))
        #expect(reader.nextLine().map { String(decoding: $0, as: UTF8.self) } == #"{"ok":1}"#)
    }
}
