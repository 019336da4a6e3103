-- shutdown: n threads blocked at exit, a third each on MVars, threadDelay
-- (1 h) and threadWaitRead (pipes never written), each `frames` frames
-- deep with a `finally` handler in every frame.  GHC's exit does not run
-- the handlers of blocked threads, so the twin does what capstan's run()
-- does at exit: it kills every blocked thread and waits until every
-- handler has run.  exit_ns = that time / n; floor_ns = throwIO
-- ThreadKilled caught through the same frames; ratio = the quotient.
-- Haskell twin of nofib_like/shutdown.cpp (threads007.hs: the same with
-- Chan reads instead of fd waits; both are Unwind.exitBench).
module Main (main) where

import Control.Concurrent (threadWaitRead)
import Control.Monad (replicateM)
import System.Posix.IO (createPipe)

import Unwind (exitBench)

main :: IO ()
main = exitBench "shutdown" 100000 $ do
  pipes <- replicateM 16 createPipe
  return (\i -> threadWaitRead (fst (pipes !! (i `mod` 16))))
