from kda_lab.launch.launchers import main

raise SystemExit(main())
