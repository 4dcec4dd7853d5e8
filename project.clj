; Leiningen project that streamparse's `sparse jar` / `sparse submit` (without -j) use to build the topology jar.
; The jar they build holds no Storm class: :jar-exclusions drop org.apache.storm (except flux), so it contains
; only resources/ (a copy of src/, the keysplit package) and the cluster's own Storm runs the Python components
; over multi-lang. Which Storm releases work is therefore decided by multi-lang behaviour, not by the version
; below (which only compiles the jar): Storm 1.2.x and every 2.x release with keysplit.route=fields; the
; direct route needs Storm < 2.6.0 (README, "On a cluster"). `keysplit jar` builds the same jar without lein
; or a JVM; submit it with `sparse submit -j FILE`. As root, sparse wants LEIN_ROOT=1.
(defproject keysplit "0.1.0-SNAPSHOT"
  :resource-paths ["_resources"]
  :target-path "_build"
  :min-lein-version "2.0.0"
  :jvm-opts ["-client"]
  :dependencies  [[org.apache.storm/storm-core "1.2.4"]
                  [org.apache.storm/flux-core "1.2.4"]]
  :jar-exclusions     [#"log4j\.properties" #"org\.apache\.storm\.(?!flux)" #"trident" #"META-INF" #"meta-inf" #"\.yaml"]
  :uberjar-exclusions [#"log4j\.properties" #"org\.apache\.storm\.(?!flux)" #"trident" #"META-INF" #"meta-inf" #"\.yaml"]
  )
