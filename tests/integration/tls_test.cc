// TLS termination through real processes: heft with certificates made at
// test time by the `openssl` command (a throwaway CA, leaves for a.test,
// b.test and *.w.test), demo backends behind it, and real clients: curl,
// `openssl s_client`, Python's ssl and http.client (tls_client.py).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "process_util.h"

namespace heft::test {
namespace {

const std::string kClientScript = std::string(HEFT_SOURCE_DIR) + "/tests/integration/tls_client.py";

// A CA and leaves signed by it, in `dir`: NAME.pem / NAME.key for each
// (file, DNS name, organization) given.
void make_certificates(const std::string& dir) {
  const std::string script = fmt::format(R"(set -e
cd {}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 \
  -subj /CN=heft-test-ca
leaf() {{
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2/O=$3"
  printf "subjectAltName=DNS:%s\n" "$2" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out "$1.pem" -extfile "$1.ext"
}}
leaf a a.test first
leaf b b.test first
leaf w '*.w.test' first
leaf a2 a.test second
)",
                                         dir);
  const CommandRun run = run_shell(script);
  ASSERT_EQ(run.exit_code, 0) << run.out;
}

// The `requests` count a demo backend reports at /_control/stats.
long backend_requests(uint16_t port) {
  HttpClient client(port);
  const Response r = client.get("/_control/stats");
  const auto at = r.body.find("\"requests\":");
  if (r.status != 200 || at == std::string::npos) return -1;
  return std::atol(r.body.c_str() + at + 11);
}

struct TlsFleet {
  std::string dir = make_temp_dir();
  uint16_t port = free_port();
  uint16_t admin_port = free_port();
  std::vector<Backend> backends;
  Process heft;

  // heft on `port` with three https sites (a.test split 5:3:2 over three
  // backends, b.test and x.w.test on the first); `a_site_extra`: more
  // lines in a.test's site; `globals`: more global options.
  void start(const std::string& a_site_extra = "", const std::string& a_pool = "", const std::string& globals = "") {
    make_certificates(dir);
    for (const char* name : {"a", "b", "c"}) backends.push_back(start_backend(dir, name));
    const std::string pool =
        !a_pool.empty() ? a_pool
                        : fmt::format("\t\tto 127.0.0.1:{} weight 5\n\t\tto 127.0.0.1:{} weight 3\n"
                                      "\t\tto 127.0.0.1:{} weight 2\n",
                                      backends[0].port, backends[1].port, backends[2].port);
    heft = start_heft(dir, fmt::format(R"({{
	workers 2
	admin 127.0.0.1:{admin}
{globals}}}
https://a.test:{port} {{
	tls a.pem a.key
{extra}	reverse_proxy {{
{pool}	}}
}}
https://b.test:{port} {{
	tls b.pem b.key
	reverse_proxy 127.0.0.1:{first}
}}
https://x.w.test:{port} {{
	tls w.pem w.key
	reverse_proxy 127.0.0.1:{first}
}}
)",
                                       fmt::arg("admin", admin_port), fmt::arg("globals", globals), fmt::arg("port", port), fmt::arg("extra", a_site_extra),
                                       fmt::arg("pool", pool), fmt::arg("first", backends[0].port)),
                      port);
  }

  // The subject of the certificate heft serves for `name` ("" = no SNI).
  std::string served_subject(const std::string& name) const {
    const std::string sni = name.empty() ? "-noservername" : "-servername " + name;
    return run_shell(fmt::format("openssl s_client -connect 127.0.0.1:{} {} </dev/null 2>/dev/null | "
                                 "openssl x509 -noout -subject",
                                 port, sni))
        .out;
  }
  // `options`: more of curl's (its default over TLS is HTTP/2 where ALPN offers it).
  CommandRun curl(const std::string& name, const std::string& path = "/", const std::string& options = "",
                  const std::string& format = "%{http_code} %{ssl_verify_result}") const {
    return run_shell(fmt::format("curl -sS --max-time 20 --cacert {0}/ca.pem --resolve {1}:{2}:127.0.0.1 {4} "
                                 "-o /dev/null -w '{5}' https://{1}:{2}{3}",
                                 dir, name, port, path, options, format));
  }
  CommandRun python(const std::string& mode, const std::string& name, const std::string& extra = "") const {
    return run_shell(fmt::format("python3 {} {} --port {} --ca {}/ca.pem --name {} {}", kClientScript, mode, port, dir,
                                 name, extra),
                     120s);
  }
};

TEST(Tls, SniPicksEachNamesCertificate) {
  TlsFleet f;
  f.start();
  EXPECT_NE(f.served_subject("a.test").find("CN = a.test"), std::string::npos) << f.served_subject("a.test");
  EXPECT_NE(f.served_subject("b.test").find("CN = b.test"), std::string::npos);
  // x.w.test has no certificate of its own: the wildcard's.
  EXPECT_NE(f.served_subject("x.w.test").find("CN = *.w.test"), std::string::npos);
  // Another name, or none: the first certificate, the default.
  EXPECT_NE(f.served_subject("other.test").find("CN = a.test"), std::string::npos);
  EXPECT_NE(f.served_subject("").find("CN = a.test"), std::string::npos);
}

TEST(Tls, CurlVerifiesEachNameOverHttps) {
  TlsFleet f;
  f.start();
  for (const char* name : {"a.test", "b.test", "x.w.test"}) {
    const CommandRun run = f.curl(name);
    EXPECT_EQ(run.exit_code, 0) << name << ": " << run.out;
    EXPECT_EQ(run.out, "200 0") << name;  // status 200, certificate verified
  }
}

TEST(Tls, OnlyTls12And13WithForwardSecretAeadCiphers) {
  TlsFleet f;
  f.start();
  const auto s_client = [&](const std::string& options) {
    return run_shell(fmt::format("openssl s_client -connect 127.0.0.1:{} -servername a.test {} </dev/null", f.port,
                                 options));
  };
  const CommandRun v13 = s_client("-tls1_3");
  EXPECT_EQ(v13.exit_code, 0) << v13.out;
  EXPECT_NE(v13.out.find("New, TLSv1.3"), std::string::npos) << v13.out;
  const CommandRun v12 = s_client("-tls1_2");
  EXPECT_EQ(v12.exit_code, 0) << v12.out;
  EXPECT_NE(v12.out.find("New, TLSv1.2, Cipher is ECDHE-ECDSA-"), std::string::npos) << v12.out;
  // The client at security level 0 offers them; heft refuses.
  for (const char* old : {"-tls1_1", "-tls1"}) {
    const CommandRun run = s_client(std::string(old) + " -cipher DEFAULT@SECLEVEL=0");
    EXPECT_NE(run.exit_code, 0) << old << ": " << run.out;
    EXPECT_NE(run.out.find("alert protocol version"), std::string::npos) << old << ": " << run.out;
  }
  // TLS 1.2 without forward secrecy or AEAD: no cipher in common.
  for (const char* weak : {"ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA384", "AES128-GCM-SHA256"}) {
    const CommandRun run = s_client(fmt::format("-tls1_2 -cipher {}", weak));
    EXPECT_NE(run.exit_code, 0) << weak << ": " << run.out;
    EXPECT_EQ(run.out.find("New, TLSv1.2, Cipher is " + std::string(weak)), std::string::npos) << run.out;
  }
}

TEST(Tls, ThousandRequestsSplitExactlyAtTheBackends) {
  TlsFleet f;
  f.start();
  std::vector<long> before;
  for (const Backend& b : f.backends) before.push_back(backend_requests(b.port));
  const CommandRun run = f.python("split", "a.test", "--requests 1000 --connections 20");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("statuses {200: 1000}"), std::string::npos) << run.out;
  const std::vector<long> expected{500, 300, 200};
  // Less one: a backend counts the /_control/stats request asking it too.
  for (std::size_t i = 0; i < f.backends.size(); ++i)
    EXPECT_EQ(backend_requests(f.backends[i].port) - before[i] - 1, expected[i]) << f.backends[i].name;
}

TEST(Tls, SessionsResumeWithTls13TicketsAndTls12) {
  TlsFleet f;
  f.start();
  for (const char* version : {"1.3", "1.2"}) {
    const CommandRun run = f.python("resume", "a.test", std::string("--tls ") + version);
    EXPECT_EQ(run.exit_code, 0) << run.out;
    EXPECT_NE(run.out.find("reused True status 200"), std::string::npos) << "TLS " << version << ": " << run.out;
  }
}

TEST(Tls, GarbageInsteadOfAClientHelloIsClosedAndOthersAreServed) {
  TlsFleet f;
  f.start();
  for (int i = 0; i < 20; ++i) {
    const int fd = connect_to(f.port);
    ASSERT_GE(fd, 0);
    const std::string plain = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
    ASSERT_EQ(::send(fd, plain.data(), plain.size(), MSG_NOSIGNAL), static_cast<ssize_t>(plain.size()));
    // An alert at most, then the end (reads are bounded by connect_to's 10 s).
    char buf[4096];
    ssize_t total = 0, n = 0;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) total += n;
    EXPECT_EQ(n, 0) << "the connection was not closed: " << std::strerror(errno);
    EXPECT_LT(total, 64) << "more than an alert came back";
    ::close(fd);
  }
  EXPECT_TRUE(f.heft.running());
  EXPECT_EQ(f.curl("a.test").out, "200 0");
  EXPECT_TRUE(wait_for_log(f.heft, "TLS handshake with 127.0.0.1 failed")) << f.heft.log();
}

TEST(Tls, AClientSilentInItsHandshakeIsClosedAfterTheHeaderTimeout) {
  TlsFleet f;
  f.start("", "", "\theader_timeout 1s\n");
  const int fd = connect_to(f.port);  // reads bounded by 10 s
  ASSERT_GE(fd, 0);
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, 0);
  EXPECT_EQ(n, 0) << "not closed: " << std::strerror(errno);
  ::close(fd);
  EXPECT_TRUE(wait_for_log(f.heft, "TLS handshake with 127.0.0.1 failed: Connection timed out")) << f.heft.log();
}

TEST(Tls, BackendSeesHttpsAndTheAccessLogTheHandshake) {
  uint16_t origin_port = 0;
  const int listener = listen_on_loopback(origin_port, std::chrono::seconds(20));
  ASSERT_GE(listener, 0);
  TlsFleet f;
  const std::string log_path = f.dir + "/access.log";
  f.start(fmt::format("\tlog {{\n\t\toutput file {}\n\t}}\n", log_path), fmt::format("\t\tto 127.0.0.1:{}\n", origin_port));
  std::thread client([&] { EXPECT_EQ(f.curl("a.test", "/", "--http1.1").out, "200 0"); });
  const int origin = accept_scripted(listener);
  ASSERT_GE(origin, 0);
  std::string head;
  ASSERT_TRUE(read_until_head(origin, head));
  const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  ::send(origin, answer.data(), answer.size(), MSG_NOSIGNAL);
  client.join();
  ::close(origin);
  ::close(listener);
  EXPECT_NE(head.find("X-Forwarded-Proto: https\r\n"), std::string::npos) << head;
  std::string log;
  for (int i = 0; i < 200 && log.find('\n') == std::string::npos; ++i) {  // the log is written behind the request
    std::this_thread::sleep_for(25ms);
    log = read_file(log_path);
  }
  EXPECT_NE(log.find(R"("tls":{"resumed":false,"version":"TLSv1.3","cipher_suite":"TLS_)"), std::string::npos) << log;
  EXPECT_NE(log.find(R"("proto":"http/1.1","server_name":"a.test"})"), std::string::npos) << log;
}

// ALPN: HTTP/2 where the client offers it (curl's default), HTTP/1.1 where
// it asks for that alone; several requests on one HTTP/2 connection.
TEST(Tls, AlpnChoosesHttp2OrHttp11) {
  TlsFleet f;
  f.start();
  EXPECT_EQ(f.curl("a.test", "/", "--http2", "%{http_code} %{http_version}").out, "200 2");
  EXPECT_EQ(f.curl("a.test", "/", "--http1.1", "%{http_code} %{http_version}").out, "200 1.1");
  // One curl, ten URLs: one connection, ten streams.
  std::string more = "--http2";
  for (int i = 0; i < 9; ++i) more += fmt::format(" -o /dev/null https://a.test:{}/", f.port);
  const CommandRun ten = f.curl("a.test", "/", more, "%{http_code} %{http_version} %{num_connects};");
  EXPECT_EQ(ten.out, "200 2 1;200 2 0;200 2 0;200 2 0;200 2 0;200 2 0;200 2 0;200 2 0;200 2 0;200 2 0;");
}

TEST(Tls, ReloadSwapsTheCertificateAndKeepsOpenConnections) {
  TlsFleet f;
  f.start();
  EXPECT_NE(f.served_subject("a.test").find("O = first"), std::string::npos);
  // A keep-alive connection from before the swap.
  const std::string flag = f.dir + "/flag";
  Process held({"/usr/bin/python3", kClientScript, "hold", "--port", std::to_string(f.port), "--ca", f.dir + "/ca.pem",
                "--name", "a.test", "--flag", flag},
               f.dir + "/held.log");
  ASSERT_TRUE(wait_for_log(held, "first 200", 20s)) << held.log();

  // New files in place, then a reload: new handshakes get the new certificate.
  ASSERT_EQ(run_shell(fmt::format("cp {0}/a2.pem {0}/a.pem && cp {0}/a2.key {0}/a.key", f.dir)).exit_code, 0);
  const CommandRun reload = run_shell(fmt::format("{} reload {}/Heftfile", HEFT_BINARY, f.dir));
  ASSERT_EQ(reload.exit_code, 0) << reload.out;
  EXPECT_NE(f.served_subject("a.test").find("O = second"), std::string::npos) << f.served_subject("a.test");
  EXPECT_EQ(f.curl("a.test").out, "200 0");

  // The connection from before still works.
  write_file(flag, "");
  EXPECT_TRUE(held.wait(30s).has_value());
  EXPECT_NE(held.log().find("second 200"), std::string::npos) << held.log();

  // A key of another certificate: refused where the Heftfile names it; the
  // certificate served stays.
  ASSERT_EQ(run_shell(fmt::format("cp {0}/b.key {0}/a.key", f.dir)).exit_code, 0);
  const CommandRun bad = run_shell(fmt::format("{} reload {}/Heftfile", HEFT_BINARY, f.dir));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("Heftfile:6:12: key \"" + f.dir + "/a.key\" does not match the certificate"),
            std::string::npos)
      << bad.out;
  EXPECT_NE(f.served_subject("a.test").find("O = second"), std::string::npos);
  EXPECT_EQ(f.curl("a.test").out, "200 0");
}

TEST(Tls, AdminApiPatchSwapsTheCertificateOrRefusesABadKey) {
  TlsFleet f;
  f.start();
  const std::string at = "/config/apps/tls/certificates/load_files/0";
  const auto entry = [&](const std::string& certificate, const std::string& key) {
    return fmt::format(R"({{"certificate":"{0}/{1}","key":"{0}/{2}","tags":["cert0"]}})", f.dir, certificate, key);
  };
  const Response bad = admin_call(f.admin_port, "PATCH", at, entry("a2.pem", "b.key"));
  EXPECT_EQ(bad.status, 400) << bad.body;
  // The message as the JSON answer carries it (its quotes escaped).
  EXPECT_NE(bad.body.find(R"(/apps/tls/certificates/load_files/0/key: key \")" + f.dir + R"(/b.key\" does not match)"),
            std::string::npos)
      << bad.body;
  EXPECT_NE(f.served_subject("a.test").find("O = first"), std::string::npos);

  const Response good = admin_call(f.admin_port, "PATCH", at, entry("a2.pem", "a2.key"));
  EXPECT_EQ(good.status, 200) << good.body;
  EXPECT_NE(f.served_subject("a.test").find("O = second"), std::string::npos) << f.served_subject("a.test");
  EXPECT_EQ(f.curl("a.test").out, "200 0");
}

TEST(Tls, ValidateNamesTheBadFileAndWhere) {
  const std::string dir = make_temp_dir();
  make_certificates(dir);
  write_file(dir + "/garbage.pem", "not a certificate\n");
  const auto validate = [&](const std::string& tls_line) {
    write_file(dir + "/Heftfile", "https://a.test:8443 {\n\t" + tls_line + "\n\treverse_proxy 127.0.0.1:9\n}\n");
    return run_shell(fmt::format("{} validate {}/Heftfile", HEFT_BINARY, dir));
  };
  CommandRun run = validate("tls missing.pem a.key");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.out.find(fmt::format("Heftfile:2:6: cannot read certificate file \"{}/missing.pem\": No such file",
                                     dir)),
            std::string::npos)
      << run.out;
  run = validate("tls garbage.pem a.key");
  EXPECT_NE(run.out.find(fmt::format("Heftfile:2:6: certificate \"{}/garbage.pem\" is not a PEM certificate", dir)),
            std::string::npos)
      << run.out;
  run = validate("tls a.pem b.key");
  EXPECT_NE(run.out.find("Heftfile:2:12: key \"" + dir + "/b.key\" does not match the certificate"), std::string::npos)
      << run.out;
  run = validate("tls /dev/zero a.key");  // never read: it would not end
  EXPECT_NE(run.out.find("Heftfile:2:6: cannot read certificate file \"/dev/zero\": not a regular file"),
            std::string::npos)
      << run.out;
  run = validate("tls a.pem a.key");
  EXPECT_EQ(run.exit_code, 0) << run.out;
}

}  // namespace
}  // namespace heft::test
