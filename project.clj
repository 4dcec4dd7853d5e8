; Leiningen project that streamparse's `sparse jar` / `sparse submit` use to build the topology jar.
; Storm 1.2.4 is the last Storm 1.x release; streamparse 5 submits over Nimbus' Thrift API, which Storm 1.x
; speaks (streamparse's `sparse run` local mode does not work with Storm 2.x: pystorm/streamparse#464).
; The cluster's Storm version must match the storm-core version below. As root, run sparse with LEIN_ROOT=1.
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
