#include "sample_config.h"

#include <cstdlib>

#include "config/heftfile.h"
#include "config/json.h"

namespace heft::fuzz {

std::string_view sample_heftfile() {
  return R"({
	admin 127.0.0.1:2019
	workers 4
	grace_period 30s
}

api.example.com, www.example.com:80 {
	log {
		output file /var/log/heft/api.log
	}
	reverse_proxy {
		to 10.0.0.1:9000 weight 10
		to 10.0.0.2:9000 10.0.0.3:9000 weight 3 max_fails 3 fail_timeout 30s
		to 10.0.0.9:9000 backup
		lb_policy least_conn
		next_upstream error timeout http_502 http_503
		next_upstream_tries 2
		connect_timeout 250ms
		header_up X-Forwarded-Proto http
		header_down -Server
		health_uri /healthz
		health_interval 5s
		health_status 2xx
	}
}

:8080 {
	default
	reverse_proxy 127.0.0.1:9001 127.0.0.1:9002
}
)";
}

const nlohmann::json& sample_config_json() {
  static const nlohmann::json json = [] {
    config::Result<config::Config> parsed = config::parse_heftfile(sample_heftfile());
    if (!parsed.ok()) std::abort();
    return config::to_json(*parsed);
  }();
  return json;
}

}  // namespace heft::fuzz
